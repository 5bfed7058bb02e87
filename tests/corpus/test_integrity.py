"""The integrity corpus (issue 15, groups 1, 2 and 5): damaged artefacts and bad market data driven
through the CLI as a user would. Every bad row exits 2 with one line (no traceback) naming the
problem, and leaves nothing in its output; the good rows beside them keep passing.

Fixtures are built once per module: a one-session synthetic market and its feature cache, a
checkpoint of a fresh agent for that cache, and a few hand-built DBN files of 400 records.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from foxhunt.agent.agent import Agent
from foxhunt.cli import app
from foxhunt.config.loader import load_config
from foxhunt.data.arrays import ACTION_ADD, ACTION_TRADE, MboArrays
from foxhunt.data.config import SynthConfig
from foxhunt.data.dbn_write import write_book, write_mbo, write_trades
from foxhunt.data.synth import write_synthetic
from foxhunt.dataset.build import get_or_build
from foxhunt.features.cache_file import meta_hash
from foxhunt.policy.checkpoint import save_checkpoint
from tests.factories import make_book, make_trades
from tests.tamper import cache_parts, edit_column, edit_meta, flip_bit_at, flip_bytes, write_cache

pytestmark = pytest.mark.usefixtures("one_thread")

PROFILE = ["--profile", "smoke"]
T0 = 1_767_000_000 * 10**9  # inside a session
N = 400


@dataclass
class Files:
    """Every input of the corpus, built once."""

    root: Path
    market: Path  # synthetic market folder (MBP-10 + trades)
    cache: Path  # its feature cache (smoke profile)
    checkpoint: Path  # a fresh agent's checkpoint fitting the cache
    book: Path  # 400 MBP-10 records
    trades: Path  # trades over the same time as ``book``


def _agent_checkpoint(path: Path, cfg, *, nan: bool = False, **meta: object) -> Path:
    agent = Agent(cfg.agent, cfg.env.branches, device="cpu", seed=0, replay_capacity=16)
    if nan:
        with torch.no_grad():
            next(agent.policy.net.parameters()).view(-1)[0] = float("nan")
    return save_checkpoint(
        path,
        policy=agent.policy.state_dict(),
        branches=cfg.env.branches,
        meta={"config": cfg.model_dump(mode="json"), "fold": 0, "epoch": 0, **meta},
    )


def _mbo(ts: list[int]) -> MboArrays:
    """Resting orders alternating bid/ask around 5000, then one trade; ``ts`` per record."""
    n = len(ts)
    side = np.frombuffer(b"BA" * (n // 2) + b"B" * (n % 2), np.uint8).copy()
    price = np.where(side == ord("B"), 5000.0, 5000.25) - np.arange(n) // 2 * 0.25 * np.where(
        side == ord("B"), 1, -1
    )
    action = np.full(n, ACTION_ADD, np.uint8)
    action[-1] = ACTION_TRADE
    return MboArrays(
        ts_event=T0 + np.asarray(ts, np.int64),
        ts_recv=T0 + np.asarray(ts, np.int64) + 1000,
        instrument_id=np.ones(n, np.uint32),
        order_id=np.arange(1, n + 1, dtype=np.uint64),
        price_raw=np.rint(price * 1e9).astype(np.int64),
        price=price,
        size=np.ones(n, np.int64),
        action=action,
        side=side,
        flags=np.full(n, 128, np.uint8),
        sequence=np.arange(n, dtype=np.uint32),
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("corpus")
    cfg = load_config("smoke")
    market = root / "market"
    write_synthetic(SynthConfig(seed=3, sessions=1, events_per_session=1500), market)
    cache = get_or_build([market], cfg, root / "cache").path
    ts = T0 + np.arange(N) * 10**8
    book = write_book(root / "book.mbp-10.dbn.zst", make_book(ts, np.zeros(N)), symbols={1: "ESH6"})
    trades = write_trades(
        root / "book.trades.dbn.zst",
        make_trades(ts[::4] + 1, np.full(N // 4, 5000.0), np.ones(N // 4), "BA" * (N // 8)),
        symbols={1: "ESH6"},
    )
    return Files(root, market, cache, _agent_checkpoint(root / "agent", cfg), book, trades)


# --- the bad inputs, made on demand from the fixtures -------------------------------------------


def _trades_priced(f: Files, name: str, price: float) -> Path:
    ts = T0 + np.arange(N)[::4] * 10**8 + 1
    prices = np.full(len(ts), 5000.0)
    prices[7] = price
    return write_trades(
        f.root / name, make_trades(ts, prices, np.ones(len(ts)), "B" * len(ts)), symbols={1: "ESH6"}
    )


def _own_dbn_flipped(f: Files) -> Path:
    """foxhunt's own MBP-10 file with one bit flipped in the middle of its compressed records: the
    same flip in the file as written without the frame's content checksum decoded as other data."""
    return flip_bit_at(f.book, f.root / "flipped.mbp-10.dbn.zst", f.book.stat().st_size // 2)


def _cut_rows(f: Files) -> Path:
    table, raw = cache_parts(f.cache)
    return write_cache(f.root / "cut.arrow", table.slice(0, table.num_rows - 10), raw)


def _broken_json(f: Files) -> Path:
    table, raw = cache_parts(f.cache)
    return write_cache(f.root / "brokenjson.arrow", table, raw[: len(raw) // 2])


def _format_1(meta: dict) -> None:
    meta.pop("content_hash")
    meta.pop("meta_hash")
    meta["format_version"] = 1


def _source_changed(f: Files) -> Path:
    """A cache whose recorded source file was edited after the build: the good cache as it would be
    built from a copy of the market (the same bytes, so the same columns; its metadata names the
    copy and is hashed again), then one file of the copy edited."""
    copy = f.root / "market-copy"
    shutil.copytree(f.market, copy)

    def moved(meta: dict) -> None:
        for source in meta["sources"]:
            source["path"] = str(copy / source["name"])
        meta["meta_hash"] = meta_hash(meta)

    cache = edit_meta(f.cache, f.root / "copied.arrow", moved)
    trades = next(copy.glob("*.trades.dbn.zst"))
    trades.write_bytes(trades.read_bytes() + b"\0")
    return cache


def _ckpt_flipped(f: Files) -> Path:
    weights = f.checkpoint
    start = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    return flip_bytes(weights, f.root / "flipped.safetensors", 16, seed=2, lo=start)


def _ckpt_header(f: Files, name: str, **meta: object) -> Path:
    return _agent_checkpoint(f.root / name, load_config("smoke"), **meta)


def _ckpt_without_fold(f: Files) -> Path:
    cfg = load_config("smoke")
    agent = Agent(cfg.agent, cfg.env.branches, device="cpu", seed=0, replay_capacity=16)
    return save_checkpoint(
        f.root / "nofold",
        policy=agent.policy.state_dict(),
        branches=cfg.env.branches,
        meta={"config": cfg.model_dump(mode="json"), "epoch": 0},
    )


def _ckpt_bad_config(f: Files) -> Path:
    cfg = load_config("smoke")
    bad = cfg.model_dump(mode="json")
    bad["agent"]["learn"]["lr"] = "fast"
    agent = Agent(cfg.agent, cfg.env.branches, device="cpu", seed=0, replay_capacity=16)
    return save_checkpoint(
        f.root / "badcfg",
        policy=agent.policy.state_dict(),
        branches=cfg.env.branches,
        meta={"config": bad, "fold": 0, "epoch": 0},
    )


def _ckpt_edited_header(f: Files) -> Path:
    """The header's JSON edited in place (epoch 0 -> 7, same length), the tensors untouched."""
    raw = f.checkpoint.read_bytes()
    edited = raw.replace(b'\\"epoch\\": 0', b'\\"epoch\\": 7', 1)
    assert edited != raw
    target = f.root / "edited.safetensors"
    target.write_bytes(edited)
    return target


def _three_records(f: Files) -> Path:
    ts = T0 + np.arange(3) * 10**8
    return write_book(f.root / "three.mbp-10.dbn.zst", make_book(ts, np.zeros(3)), symbols={1: "ESH6"})


def _overlapping_copy(f: Files) -> Path:
    copy = f.root / "copy-of-book.mbp-10.dbn.zst"
    shutil.copyfile(f.book, copy)
    return copy


# --- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    args: Callable[[Files, Path], list[str]]  # (fixtures, output path) -> command line
    message: str  # a regex the one line must match (exit 2), or "" for a passing case (exit 0)
    written: tuple[str, ...] = ()  # for a passing case: what must exist under the output
    slow: bool = False  # a whole backtest (over 10 s on a loaded 2-core host): run with -m slow


def _bars(*inputs: Callable[[Files], Path]) -> Callable[[Files, Path], list[str]]:
    def args(f: Files, out: Path) -> list[str]:
        data = [str(make(f)) for make in inputs]
        return ["data", "bars", "--data", *data, "--out", str(out), "-q", *PROFILE]

    return args


def _backtest_cache(make: Callable[[Files], Path], *more: str) -> Callable[[Files, Path], list[str]]:
    return lambda f, out: ["backtest", "--cache", str(make(f)), "--out", str(out), "-q", *more]


def _backtest_ckpt(make: Callable[[Files], Path]) -> Callable[[Files, Path], list[str]]:
    return lambda f, out: [
        "backtest", "--checkpoint", str(make(f)), "--cache", str(f.cache), "--out", str(out), "-q"
    ]


CASES = [
    # group 1: corrupt artefacts
    Case(
        "cache: 16 flipped bytes",
        _backtest_cache(lambda f: flip_bytes(f.cache, f.root / "flipped.arrow", 16, seed=0)),
        r"flipped\.arrow: (corrupt cache|unreadable cache file)",
    ),
    Case(
        "cache: edited close prices",
        _backtest_cache(lambda f: edit_column(f.cache, f.root / "close.arrow", "close", lambda v: v * 1.01)),
        r"close\.arrow: corrupt cache: the content hash of column\(s\) close does not match",
    ),
    Case(
        "cache: edited row count in the metadata",
        _backtest_cache(lambda f: edit_meta(f.cache, f.root / "rows.arrow", lambda m: m.update(rows=9))),
        r"rows\.arrow: corrupt cache: its metadata does not match its hash",
    ),
    Case(
        "cache: rows cut from the table",
        _backtest_cache(_cut_rows),
        r"cut\.arrow: corrupt cache: \d+ rows, its metadata records \d+",
    ),
    Case(
        "cache: metadata JSON broken",
        _backtest_cache(_broken_json),
        r"brokenjson\.arrow: corrupt cache: its metadata is not valid JSON",
    ),
    Case(
        "cache: metadata lacks a key",
        _backtest_cache(lambda f: edit_meta(f.cache, f.root / "nokey.arrow", lambda m: m.pop("label_span"))),
        r"nokey\.arrow: corrupt cache: its metadata lacks label_span",
    ),
    Case(
        "cache: built before content hashes (format 1)",
        _backtest_cache(lambda f: edit_meta(f.cache, f.root / "v1.arrow", _format_1)),
        r"v1\.arrow: cache format 1, this foxhunt reads format 2 .*rebuild",
    ),
    Case(
        "features info: a corrupt cache",
        lambda f, out: ["features", "info", str(edit_column(f.cache, f.root / "c2.arrow", "ts", np.flip))],
        r"c2\.arrow: corrupt cache: the content hash of column\(s\) ts",
    ),
    Case(
        "alpha --cache: a corrupt cache",
        lambda f, out: [
            "alpha", "--cache", str(edit_column(f.cache, f.root / "c3.arrow", "close", lambda v: -v)),
            "--out", str(out), "-q",
        ],
        r"c3\.arrow: corrupt cache: the content hash of column\(s\) close",
    ),
    Case(
        "checkpoint: 16 flipped weight bytes",
        _backtest_ckpt(_ckpt_flipped),
        r"flipped\.safetensors: corrupt checkpoint: the content hash of tensor ",
    ),
    Case(
        "checkpoint: NaN weights",
        _backtest_ckpt(lambda f: _ckpt_header(f, "nan", nan=True)),
        r"nan\.safetensors: non-finite weights \(NaN or Inf\) in policy/network/",
    ),
    Case(
        "checkpoint: header edited",
        _backtest_ckpt(_ckpt_edited_header),
        r"edited\.safetensors: corrupt checkpoint: its header does not match its content hash",
    ),
    Case(
        "checkpoint: header lacks fold",
        _backtest_ckpt(_ckpt_without_fold),
        r"nofold\.safetensors: its header lacks an integer fold",
    ),
    Case(
        "checkpoint: header config invalid",
        _backtest_ckpt(_ckpt_bad_config),
        r"badcfg\.safetensors: its header config is invalid \(header config: agent\.learn\.lr",
    ),
    Case(
        "export: flipped weight bytes",
        lambda f, out: ["export", str(_ckpt_flipped(f)), "--out", str(out / "export")],
        r"flipped\.safetensors: corrupt checkpoint: the content hash of tensor ",
    ),
    Case(
        "foxhunt's own DBN file: one flipped bit",
        _bars(_own_dbn_flipped),
        r"flipped\.mbp-10\.dbn\.zst: corrupt zstd data",
    ),
    Case(
        "alpha --cache: a source file changed since the build",
        lambda f, out: ["alpha", "--cache", str(_source_changed(f)), "--out", str(out), "-q"],
        r"trades\.dbn\.zst: this source of cache .* has changed since the cache was built",
    ),
    # group 2 / 5: bad market data
    Case(
        "undefined trade price",
        _bars(lambda f: f.book, lambda f: _trades_priced(f, "undef.trades.dbn.zst", float("nan"))),
        r"undef\.trades\.dbn\.zst: 1 trade\(s\) with an undefined or non-positive price",
    ),
    Case(
        "negative trade price",
        _bars(lambda f: f.book, lambda f: _trades_priced(f, "neg.trades.dbn.zst", -5000.0)),
        r"neg\.trades\.dbn\.zst: 1 trade\(s\) with an undefined or non-positive price .*price -5000",
    ),
    Case(
        "the same file twice",
        _bars(lambda f: f.book, lambda f: f.book),
        r"book\.mbp-10\.dbn\.zst: is given twice",
    ),
    Case(
        "a file and its folder",
        _bars(lambda f: f.market, lambda f: next(f.market.glob("*.trades.dbn.zst"))),
        r"trades\.dbn\.zst: is given twice: as .* \(in .*market\)",
    ),
    Case(
        "two files of one instrument over the same time",
        _bars(lambda f: f.book, _overlapping_copy),
        r"overlaps .*mbp-10\.dbn\.zst \(book data of instrument 1 over the same time\)",
    ),
    Case(
        "out-of-order MBO into rebuild-book",
        lambda f, out: [
            "data", "rebuild-book", str(write_mbo(f.root / "shuffled.mbo.dbn.zst", _mbo([0, 5, 3, 9]))),
            "--out", str(out / "rebuilt.mbp-10.dbn.zst"),
        ],
        r"shuffled\.mbo\.dbn\.zst: ts_event goes backwards for instrument 1",
    ),
    Case(
        "a 3-record file: check leaks",
        lambda f, out: ["check", "leaks", "--data", str(_three_records(f)), "-q", *PROFILE],
        r"folds: 1 rows are too few for 3 expanding folds",
    ),
    Case(
        "a 3-record file: backtest",
        lambda f, out: ["backtest", "--data", str(_three_records(f)), "--out", str(out), "-q", *PROFILE],
        r"folds: 1 rows are too few for 3 expanding folds",
    ),
    # passing cases: they stay passing
    Case("good book and trades files", _bars(lambda f: f.book, lambda f: f.trades), "", ("bars.arrow",)),
    Case(
        "MBO in time order into rebuild-book",
        lambda f, out: [
            "data", "rebuild-book", str(write_mbo(f.root / "sorted.mbo.dbn.zst", _mbo([0, 3, 3, 9]))),
            "--out", str(out / "rebuilt.mbp-10.dbn.zst"),
        ],
        "",
        ("rebuilt.mbp-10.dbn.zst",),
    ),
    Case("features info of the good cache", lambda f, out: ["features", "info", str(f.cache)], ""),
    Case(
        "backtest of the good cache",
        _backtest_cache(lambda f: f.cache, "--policy", "long"),
        "",
        ("metrics.json",),
        slow=True,
    ),
    Case(
        "backtest of the good checkpoint",
        _backtest_ckpt(lambda f: f.checkpoint),
        "",
        ("metrics.json",),
        slow=True,
    ),
]


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in CASES]
)
def test_corpus(case: Case, files: Files, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = case.args(files, out)
    result = CliRunner().invoke(app, args)
    text = result.output
    assert "Traceback" not in text, text
    if not case.message:
        assert result.exit_code == 0, (args, text, result.exception)
        for name in case.written:
            assert (out / name).is_file(), (name, text)
        return
    assert result.exit_code == 2, (args, text, result.exception)
    lines = [line for line in text.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and re.search(case.message, lines[0].replace("\n", "")), text
    left = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert not left, left


def test_the_corpus_keeps_its_rows() -> None:
    """Every finding of groups 1, 2 and 5 is a row (a deleted row fails here, not silently)."""
    bad = [c for c in CASES if c.message]
    assert len(bad) == 25 and len(CASES) - len(bad) == 5
    assert len({c.name for c in CASES}) == len(CASES)
