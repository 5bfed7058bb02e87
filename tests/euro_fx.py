"""A small Euro FX (6E) minute-bar market written as a real DBN OHLCV-1m file.

Prices near 1.09 on the 6E tick grid (0.00005 USD per EUR, CME: 125,000 EUR a contract), 23-hour
CME Globex sessions (17:00-16:00 CT, winter: 23:00-22:00 UTC): a product whose numbers are nothing
like ES's, to show that no ES specification is applied to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from foxhunt.data.arrays import OhlcvArrays
from foxhunt.data.dbn_write import write_ohlcv

TICK = 0.00005
POINT_VALUE = 125_000.0
SYMBOL = "6EH4"
INSTRUMENT_ID = 42_140_878
SESSION_MINUTES = 23 * 60
_FIRST_OPEN_NS = np.datetime64("2024-01-07T23:00:00", "ns").astype(np.int64)  # Sunday 17:00 CT
_DAY_NS = 86_400 * 10**9


def euro_fx_bars(sessions: int, seed: int = 0, start_ticks: int = 21_800) -> OhlcvArrays:
    """``sessions`` x 1,380 one-minute bars; each minute is 8 sub-steps of -1/0/+1 tick."""
    rng = np.random.default_rng(seed)
    n = sessions * SESSION_MINUTES
    steps = rng.choice([-1, 0, 1], size=(n, 8), p=[0.35, 0.3, 0.35])
    path = start_ticks + np.cumsum(steps.reshape(-1)).reshape(n, 8)  # [n, 8] ticks inside each minute
    close = path[:, -1]
    opens = np.concatenate([[start_ticks], close[:-1]])
    high = np.maximum(path.max(axis=1), opens)
    low = np.minimum(path.min(axis=1), opens)
    minute = np.arange(SESSION_MINUTES, dtype=np.int64) * 60 * 10**9
    ts = np.concatenate([_FIRST_OPEN_NS + s * _DAY_NS + minute for s in range(sessions)])
    return OhlcvArrays(
        ts_event=ts,
        instrument_id=np.full(n, INSTRUMENT_ID, np.uint32),
        open=opens * TICK,
        high=high * TICK,
        low=low * TICK,
        close=close * TICK,
        volume=rng.integers(20, 400, n).astype(np.int64),
    )


def write_euro_fx(folder: Path, sessions: int = 4, seed: int = 0) -> Path:
    """The market as ``folder/6eh4.ohlcv-1m.dbn.zst`` (symbology: 6EH4)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "6eh4.ohlcv-1m.dbn.zst"
    return write_ohlcv(path, euro_fx_bars(sessions, seed), symbols={INSTRUMENT_ID: SYMBOL})
