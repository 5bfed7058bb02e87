"""A row close computes its new rows only (foxhunt.serve.state.IncrementalRows), and they are the rows
the batch gives: one MBP-10 stream of two synthetic sessions replayed record by record, a close at
every bar, against the batch pipeline on the same file (feature rows bit for bit) and against the
service's full path that re-runs the session's records at every close (every market tensor)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from foxhunt import api
from foxhunt.config.models import FoxhuntConfig
from foxhunt.data.dbn_read import read_raw
from foxhunt.data.dbn_write import write_records
from foxhunt.data.ingest import load_market
from foxhunt.data.schemas import Schema
from foxhunt.dataset.cache import compute_features
from foxhunt.domain.instrument import resolve_instrument
from foxhunt.env.market import MarketTensors
from foxhunt.features.pipeline import rows_from_market
from foxhunt.serve.source import ReplaySource, SourceEnded
from foxhunt.serve.state import RecordRows, RowState, _RowBuffers
from foxhunt.validation.normalise import fit_robust

# Two sessions of 2,000 book events in 15-minute bars: 92 rows a session.
MARKET = ("synth.sessions=2", "synth.events_per_session=2000", "data.bar_seconds=900")


@pytest.fixture(scope="module")
def cfg() -> FoxhuntConfig:
    return api.config("smoke", overrides=MARKET)


@pytest.fixture(scope="module")
def stream(cfg: FoxhuntConfig, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sessions' MBP-10 files as one stream (one file): the service's one-stream path."""
    root = tmp_path_factory.mktemp("market")
    books = sorted(p for p in api.synthetic_market(root, cfg) if ".mbp-10." in p.name)
    files = [read_raw(p) for p in books]
    records = np.concatenate([f.records for f in files])
    symbols = {k: v for f in files for k, v in f.instrument_symbols.items()}
    return write_records(root / "both.mbp-10.dbn", Schema.MBP_10, records, symbols=symbols)


def _replay(state: RowState, source: ReplaySource) -> RecordRows:
    """The service's loop without the policy: a close whenever a record opens a later bar, the
    session cut when it opens a later session (foxhunt.serve.intake.Intake.on_record)."""
    closes = 0
    while True:
        try:
            got = source.next(timeout=0.0)
        except SourceEnded:
            break
        assert got is not None
        bucket = state.bucket_of(int(state.decode(got.stream, got.payload)["ts_event"][0]))
        if state.bucket is not None and bucket != state.bucket:
            rows = state.rows()
            closes += 1
            if bucket[0] != state.bucket[0]:
                state.end_session(rows)
        state.bucket = bucket
        state.append(got.stream, got.payload)
    rows = state.rows()
    assert closes > 150  # a close per bar: the chunks are single rows
    return rows


def _rows(cfg: FoxhuntConfig, stream: Path, tmp_path: Path, incremental: bool) -> RecordRows:
    md = load_market([stream], cfg.data)
    x = compute_features(rows_from_market(md, cfg.data), cfg)
    scaler = fit_robust(x.values, np.arange(len(x.values)), x.columns)
    source = ReplaySource([stream])
    state = RowState(source.streams, cfg, scaler, resolve_instrument(["ESZ6"]), tmp_path)
    assert state.incremental is not None  # one book stream, time bars, the built-in families
    if not incremental:
        state.incremental = None  # the full path: the session's records through the batch at every close
    try:
        return _replay(state, source)
    finally:
        state.close()


@pytest.fixture(scope="module")
def incremental(cfg: FoxhuntConfig, stream: Path, tmp_path_factory: pytest.TempPathFactory) -> RecordRows:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_RowBuffers, "first", 8)  # the row buffers grow several times over the replay
        return _rows(cfg, stream, tmp_path_factory.mktemp("inc"), incremental=True)


def test_served_rows_are_the_batch_rows_bit_for_bit(
    cfg: FoxhuntConfig, stream: Path, incremental: RecordRows
) -> None:
    inp = rows_from_market(load_market([stream], cfg.data), cfg.data)
    batch = compute_features(inp, cfg).values
    assert incremental.count == len(batch) and inp.segment_start.sum() == 2  # both sessions, every row
    assert np.array_equal(incremental.ts, inp.ts)
    assert np.array_equal(incremental.features.view(np.uint32), batch.view(np.uint32))


def test_the_market_tensors_are_the_full_paths(
    cfg: FoxhuntConfig, stream: Path, incremental: RecordRows, tmp_path: Path
) -> None:
    """Normalised features, prices, touch, the plan's volatility, segments and aux targets: what the
    environment steps over, appended at each close, equal to the session's rebuilt at each close."""
    full = _rows(cfg, stream, tmp_path, incremental=False)
    assert full.count == incremental.count
    for f in dataclasses.fields(MarketTensors):
        a, b = getattr(incremental.market, f.name), getattr(full.market, f.name)
        if f.name in ("feature_columns", "instrument") or a is None:
            assert a == b or a is b, f.name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, f.name
        assert bool((a == b).logical_or(a.isnan() & b.isnan()).all()), f.name
