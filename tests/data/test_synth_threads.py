"""write_synthetic simulates and writes its sessions on threads at once: the same bytes, every file and
the manifest, as one session after another, whatever order the threads finish in."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from foxhunt.data import synth
from foxhunt.data.config import SynthConfig
from foxhunt.data.schemas import Schema


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_threaded_sessions_write_the_bytes_of_sequential_ones(tmp_path: Path, monkeypatch) -> None:
    cfg = SynthConfig(seed=5, sessions=3, events_per_session=3_000, alpha=1.0)
    schemas = (Schema.MBP_10, Schema.TRADES, Schema.OHLCV_1M)
    monkeypatch.setattr(synth, "MAX_SESSION_THREADS", 1)
    one = synth.write_synthetic(cfg, tmp_path / "one", schemas)
    monkeypatch.setattr(synth, "MAX_SESSION_THREADS", 3)
    monkeypatch.setattr(synth, "usable_cores", lambda: 3)
    many = synth.write_synthetic(cfg, tmp_path / "many", schemas)
    assert [p.name for p in many] == [p.name for p in one]  # session by session, in schema order
    assert len(one) == 9 and (tmp_path / "one" / synth.MANIFEST_NAME).is_file()
    assert _digests(tmp_path / "many") == _digests(tmp_path / "one")


def test_a_failing_session_fails_the_write(tmp_path: Path, monkeypatch) -> None:
    cfg = SynthConfig(seed=5, sessions=2, events_per_session=2_000)
    real = synth.simulate_session

    def second_fails(cfg, index, **kw):
        if index == 1:
            raise RuntimeError("session 1 broke")
        return real(cfg, index, **kw)

    monkeypatch.setattr(synth, "simulate_session", second_fails)
    with pytest.raises(RuntimeError, match="session 1 broke"):
        synth.write_synthetic(cfg, tmp_path)
    assert not (tmp_path / synth.MANIFEST_NAME).exists()  # no manifest for a market half written
