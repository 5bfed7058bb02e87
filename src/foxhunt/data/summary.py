"""Ingest -> front month -> bars or snapshot rows -> Arrow file, with a summary for the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from foxhunt.console import SILENT, Reporter
from foxhunt.data.arrow_io import to_table, write_ipc
from foxhunt.data.bars import bar_log_returns, build_bars, build_snapshots
from foxhunt.data.config import DataConfig
from foxhunt.data.ingest import MarketData, load_market
from foxhunt.data.schemas import DataSource, MaskReason, RowUnit, Schema
from foxhunt.data.sessions import iso_utc

# The row fields that are 0/NaN and masked when the input lacks them (one list, for the
# metadata and the printed note).
DEPTH_FIELDS = ("bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct")  # levels 2.. only
TRADE_FIELDS = (
    "volume",
    "buy_volume",
    "sell_volume",
    "trade_count",
    "vwap",
    "trade_open",
    "trade_high",
    "trade_low",
    "trade_close",
)


def masked_fields(md: MarketData, data_source: DataSource, volume_mask: np.ndarray) -> dict[str, list[str]]:
    """MaskReason -> the row fields the input could not fill (empty for complete book data)."""
    out: dict[str, list[str]] = {}
    if data_source is DataSource.MBP10 and md.book_levels == 1:
        out[MaskReason.TOP_OF_BOOK.value] = [f"{f}[1:]" for f in DEPTH_FIELDS]
    if not volume_mask.all():
        out[MaskReason.NO_TRADES.value] = list(TRADE_FIELDS)
    return out


def masked_note(md: MarketData, masked: dict[str, list[str]], volume_mask: np.ndarray, rows: str) -> str:
    """One line for the command's output: what is masked and why ("" when nothing is)."""
    parts = []
    if MaskReason.TOP_OF_BOOK.value in masked:
        tob = sorted({r.schema for r in md.files if Schema(r.schema).is_top_of_book})
        parts.append(f"book levels 2-10 empty, depth features will be 0 (top-of-book data: {', '.join(tob)})")
    if MaskReason.NO_TRADES.value in masked:
        parts.append(
            f"volume and trade fields 0 on {int((~volume_mask).sum()):,} of {len(volume_mask):,} {rows} "
            "(no trade records: book-only data), volume features will be 0"
        )
    return ("masked: " + "; ".join(parts)) if parts else ""


def build_and_write(
    paths: Sequence[str | Path],
    data: DataConfig,
    out_dir: Path,
    config_hash: str,
    progress: Reporter = SILENT,
) -> dict[str, Any]:
    """Build the configured rows from ``paths`` and write them to ``out_dir``; return a summary.
    ``config_hash``: the whole resolved config's (:func:`foxhunt.config.loader.config_hash`), recorded."""
    md = load_market(paths, data, progress)
    crossed = int(sum(int(c.sum()) for c in md.crossed.values()))
    dropped = int(sum(r.dropped for r in md.files))
    meta: dict[str, Any] = {
        "config_hash": config_hash,
        "data_source": data.data_source.value,
        "row_unit": data.row_unit.value,
        "sources": [r.path for r in md.files],
        "book_levels": md.book_levels,
    }
    if data.row_unit is RowUnit.BAR:
        series = build_bars(md, data)
        bars, front, halt = series.bars, series.front, series.halt_dropped
        volume_mask, row_word = bars.volume_mask, "bars"
        meta["masked"] = masked_fields(md, data.data_source, volume_mask)
        path = write_ipc(to_table(bars, meta), out_dir / "bars.arrow")
        n, t0, t1 = len(bars), bars.ts_open.min(), bars.ts_close.max()
        extra: dict[str, Any] = {
            "bar": f"{data.bar_kind.value} ({data.bar_seconds} s)"
            if data.bar_kind.value == "time"
            else f"volume ({data.volume_bar_contracts})",
            "volume": int(bars.volume.sum()),
            "trades": int(bars.trade_count.sum()),
            "mean events per bar": round(float(bars.event_count.mean()), 2),
        }
        if bars.book_mask.any():
            spread = (bars.ask_px[:, 0] - bars.bid_px[:, 0]) / data.tick_size
            extra["median spread at close (ticks)"] = float(np.nanmedian(spread))
            returns = bar_log_returns(bars, bars.mid_close)[~bars.starts_segment()]
            if len(returns):
                extra["mid return std (bps)"] = round(float(returns.std()) * 1e4, 3)
    else:
        rows = build_snapshots(md, data)
        front, halt = rows.front, rows.halt_dropped
        assert rows.volume_mask is not None
        volume_mask, row_word = rows.volume_mask, "rows"
        meta["masked"] = masked_fields(md, data.data_source, volume_mask)
        path = write_ipc(to_table(rows.book, meta), out_dir / "snapshots.arrow")
        n, t0, t1 = len(rows.book), rows.book.ts_event.min(), rows.book.ts_event.max()
        extra = {"trades": len(rows.trades), "crossed rows": int(rows.crossed.sum())}
    return {
        "path": str(path),
        "row_unit": data.row_unit.value,
        "data_source": data.data_source.value,
        "files": len(md.files),
        "rows": n,
        "sessions": len(front.trade_dates),
        "span (UTC)": f"{iso_utc(t0, 's')} .. {iso_utc(t1, 's')}",
        "contracts": ", ".join(md.symbol(int(i)) for i in dict.fromkeys(front.instrument_id.tolist())),
        "rolls": ", ".join(f"{r.trade_date}: {r.from_symbol}->{r.to_symbol}" for r in front.rolls) or "none",
        "crossed states (flagged)": crossed,
        "crossed states dropped": dropped,
        "halt events skipped": halt,
        **extra,
        "config hash": config_hash,
        "masked": masked_note(md, meta["masked"], volume_mask, row_word),
    }
