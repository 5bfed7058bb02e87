"""The synthetic market straight into :class:`~foxhunt.data.ingest.MarketData`, without files.

For tests and benchmarks that need many small markets fast. The DBN round trip is covered by the
synth and ingest tests; this skips it, and produces exactly what ingesting the written files does.
"""

from __future__ import annotations

from foxhunt.data.arrays import BookArrays, TradeArrays
from foxhunt.data.config import SynthConfig
from foxhunt.data.ingest import MarketData
from foxhunt.data.synth import simulate_session


def synthetic_market(cfg: SynthConfig) -> MarketData:
    sessions = [simulate_session(cfg, i) for i in range(cfg.sessions)]
    book = BookArrays.concat([s.book for s in sessions])
    trades = TradeArrays.concat([s.trades for s in sessions])
    iid = cfg.instrument_id
    return MarketData(
        books={iid: book},
        crossed={iid: book.crossed()},
        trades={iid: trades},
        symbols={iid: cfg.symbol},
    )
