"""The feature and label kernels compiled ahead in forked processes (foxhunt.dataset.warmup): one
child per family of the stack and one for the labels, none without idle cores, a failing child
harmless; marked slow, an empty numba cache filled by the children with every kernel the guard needs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from foxhunt.config.loader import load_config
from foxhunt.dataset import warmup
from foxhunt.features.layout import STACK_FAMILIES

REPO = Path(__file__).resolve().parents[2]


def test_one_child_per_family_and_the_labels_all_finish() -> None:
    cfg = load_config("smoke")
    warm = warmup.start(cfg, idle_cores=64.0)
    n = len(warm.children)
    assert n == len(STACK_FAMILIES[cfg.data.row_unit]) + 1
    assert warm.wait() == n  # every child exited 0


def test_no_children_without_idle_cores_for_them() -> None:
    cfg = load_config("smoke")
    n = len(STACK_FAMILIES[cfg.data.row_unit]) + 1
    assert warmup.start(cfg, idle_cores=n).children == []  # one short: the caller needs a core too
    assert warmup.start(cfg, idle_cores=1.2).wait() == 0


def test_a_failing_child_changes_nothing_but_its_exit(monkeypatch) -> None:
    def broken(inp, cfg, name):
        raise RuntimeError("compiler broke")

    monkeypatch.setattr(warmup, "_compile_family", broken)
    warm = warmup.start(load_config("smoke"), idle_cores=64.0)
    children = list(warm.children)
    assert warm.wait() == 0 and all(c.exitcode == 1 for c in children)


@pytest.mark.slow
def test_children_fill_an_empty_numba_cache_with_the_guards_kernels(tmp_path: Path) -> None:
    """A fresh interpreter with an empty NUMBA_CACHE_DIR: after the wait, the cache holds an index for
    every family's kernels and the labels', so the guard's first computation loads them."""
    script = textwrap.dedent(
        """
        from foxhunt.config.loader import load_config
        from foxhunt.dataset import warmup
        warm = warmup.start(load_config("smoke"), idle_cores=64.0)
        print("finished", warm.wait(timeout=600))
        """
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=REPO, timeout=900
    )
    assert "finished 5" in out.stdout, out.stdout + out.stderr
    indexed = {p.name.split("-")[0] for p in (tmp_path / "numba").rglob("*.nbi")}
    for kernel in ("_kernels.ema_reset", "mtf._mtf_kernel", "ofi._row_pass", "tlob._tlob_kernel"):
        assert kernel in indexed, sorted(indexed)
    assert any(k.startswith("labels.") for k in indexed), sorted(indexed)
