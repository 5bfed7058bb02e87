"""Every feature family run in chunks of rows with its carried state equals the batch, bit for bit.

foxhunt serve computes the rows a close adds, not the session's again: each family's kernels take
the state the rows before left (foxhunt.features._kernels.Carry), and the batch is the one-chunk
case. A state the chunks lost (an EMA restarted, a window's history missing, an event's predecessor
forgotten) would change some row below."""

from __future__ import annotations

import numpy as np
import pytest

from foxhunt.features._kernels import Carry
from foxhunt.features.config import FeaturesConfig
from foxhunt.features.frame import RowInput
from foxhunt.features.registry import FAMILIES
from foxhunt.features.stack import compute_stack, resumable

BAR_FAMILIES = ("market", "ofi", "tlob", "mtf")
SNAPSHOT_FAMILIES = ("market", "ofi", "tlob", "mtf", "snapshot")


def _params() -> dict[str, object]:
    cfg = FeaturesConfig()
    return {name: getattr(cfg, name) for name in FAMILIES}


def _cuts(inp: RowInput, n: int, seed: int) -> np.ndarray:
    """Chunk bounds over the first ``n`` rows: random sizes, and one-row chunks around every segment
    start (a chunk that ends or starts at a session boundary, and windows that span chunks)."""
    rng = np.random.default_rng(seed)
    starts = np.flatnonzero(inp.segment_start[:n])
    near = np.concatenate([np.arange(max(s - 30, 0), min(s + 30, n)) for s in starts])
    return np.unique(np.concatenate([[0, n], rng.integers(0, n, 60), near]))


def _chunked(family, inp: RowInput, params, cuts: np.ndarray) -> np.ndarray:
    carry = Carry()
    bounds = zip(cuts[:-1], cuts[1:], strict=True)
    return np.concatenate([family.compute(inp.rows(int(a), int(b)), params, carry=carry) for a, b in bounds])


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.uint32)


@pytest.mark.parametrize("name", BAR_FAMILIES)
def test_bar_rows_in_chunks_equal_the_batch(bar_rows: RowInput, name: str) -> None:
    family, params = FAMILIES[name], _params()[name]
    batch = family.compute(bar_rows, params)
    n = len(bar_rows)
    assert bar_rows.segment_start.sum() >= 2  # the chunks cross a session boundary
    got = _chunked(family, bar_rows, params, _cuts(bar_rows, n, seed=1))
    assert np.array_equal(_bits(got), _bits(batch)), np.flatnonzero((got != batch).any(axis=1))[:5]


@pytest.mark.parametrize("name", SNAPSHOT_FAMILIES)
def test_snapshot_rows_in_chunks_equal_the_batch(snapshot_rows: RowInput, name: str) -> None:
    """Book states as rows: one event per row, and more rows than the market family's history holds."""
    family, params = FAMILIES[name], _params()[name]
    # Rows around the session boundary: the second session's first rows and the first's last.
    first = int(np.flatnonzero(snapshot_rows.segment_start)[1])
    inp = snapshot_rows.rows(first - 1500, first + 1500)
    batch = family.compute(inp, params)
    got = _chunked(family, inp, params, _cuts(inp, len(inp), seed=2))
    assert np.array_equal(_bits(got), _bits(batch)), np.flatnonzero((got != batch).any(axis=1))[:5]


def test_one_row_chunks_reach_the_batch_through_the_stack(bar_rows: RowInput) -> None:
    """The stack's masks are per row: a row at a time through compute_stack equals the batch."""
    params = _params()
    inp = bar_rows.rows(0, 700)
    batch = compute_stack(inp, BAR_FAMILIES, params)
    carry: dict[str, Carry] = {}
    rows = [compute_stack(inp.rows(t, t + 1), BAR_FAMILIES, params, carry=carry).values for t in range(700)]
    assert set(carry) == set(BAR_FAMILIES)
    assert np.array_equal(_bits(np.concatenate(rows)), _bits(batch.values))


def test_a_fresh_carry_is_the_batch_and_a_lost_one_is_not(bar_rows: RowInput) -> None:
    """Rows after a chunk computed without the state of the rows before it differ from the batch
    (the check above has something to catch), and the built-in families all take a carry."""
    assert all(resumable(FAMILIES[name]) for name in SNAPSHOT_FAMILIES)
    family, params = FAMILIES["market"], _params()["market"]
    batch = family.compute(bar_rows, params)
    tail = family.compute(bar_rows.rows(600, 800), params, carry=Carry())
    assert not np.array_equal(_bits(tail), _bits(batch[600:800]))
