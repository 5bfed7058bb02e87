"""Names shared by the data stage: DBN schemas, data sources, row units and policies.

Enum values equal the strings Databento and the TOML profiles use, so ``Schema(str(store.schema))``
and ``DataSource("mbp10")`` both work and nothing downstream compares raw strings.
"""

from __future__ import annotations

from enum import StrEnum

import databento_dbn as dbn


class Schema(StrEnum):
    """The DBN schemas foxhunt reads (values are Databento's schema names)."""

    MBO = "mbo"
    MBP_10 = "mbp-10"
    MBP_1 = "mbp-1"
    TBBO = "tbbo"
    TRADES = "trades"
    OHLCV_1S = "ohlcv-1s"
    OHLCV_1M = "ohlcv-1m"
    OHLCV_1H = "ohlcv-1h"
    OHLCV_1D = "ohlcv-1d"
    DEFINITION = "definition"
    BBO_1S = "bbo-1s"
    BBO_1M = "bbo-1m"
    # Decoded (``read_raw``) but not turned into typed arrays: nothing downstream uses them yet.
    STATISTICS = "statistics"
    STATUS = "status"
    IMBALANCE = "imbalance"

    @property
    def is_book(self) -> bool:
        """Schemas whose records carry book levels (``[n, L]`` arrays)."""
        return self in (Schema.MBP_10, Schema.MBP_1, Schema.TBBO, Schema.BBO_1S, Schema.BBO_1M)

    @property
    def is_top_of_book(self) -> bool:
        """Book schemas with the best bid and ask only (levels 2..10 absent)."""
        return self.is_book and self.levels == 1

    @property
    def has_typed_arrays(self) -> bool:
        """Whether :func:`foxhunt.data.dbn_read.to_arrays` converts this schema."""
        return self not in (Schema.STATISTICS, Schema.STATUS, Schema.IMBALANCE)

    @property
    def is_ohlcv(self) -> bool:
        return self.value.startswith("ohlcv")

    @property
    def levels(self) -> int:
        """Book depth carried by one record of this schema (0 for non-book schemas)."""
        return {
            Schema.MBP_10: 10,
            Schema.MBP_1: 1,
            Schema.TBBO: 1,
            Schema.BBO_1S: 1,
            Schema.BBO_1M: 1,
        }.get(self, 0)

    @property
    def bar_ns(self) -> int:
        """Interval of an OHLCV schema in nanoseconds (0 for others)."""
        return {
            Schema.OHLCV_1S: 1_000_000_000,
            Schema.OHLCV_1M: 60_000_000_000,
            Schema.OHLCV_1H: 3_600_000_000_000,
            Schema.OHLCV_1D: 86_400_000_000_000,
        }.get(self, 0)

    @property
    def dbn(self) -> dbn.Schema:
        return dbn.Schema.from_str(self.value)


class DataSource(StrEnum):
    """Where bars and features come from (docs/design.md §1). Part of every cache key."""

    # Book data: MBP-10 files or MBO rebuilt into MBP-10 (10 levels), or top-of-book files (MBP-1,
    # TBBO, BBO: the depth features are masked); trades from trades files or the book streams
    # (without any, the volume features are masked).
    MBP10 = "mbp10"
    OHLCV = "ohlcv"  # OHLCV bars only: book fields are 0 and masked


class RowUnit(StrEnum):
    """What one row of the feature stage is."""

    BAR = "bar"  # one row per time or volume bar
    SNAPSHOT = "snapshot"  # one row per book state


class BarKind(StrEnum):
    TIME = "time"  # fixed wall-clock length (``bar_seconds``)
    VOLUME = "volume"  # fixed traded volume (``volume_bar_contracts``)


class CrossedPolicy(StrEnum):
    """What ingest does with crossed or locked end-of-event book states (bid >= ask)."""

    FLAG = "flag"  # keep them, set ``crossed`` for each, count them in the report
    DROP = "drop"  # remove them, count them in the report


class RollRule(StrEnum):
    """How the continuous front-month series picks its contract for each session."""

    # Causal: the contract with the most volume in the *previous* session trades today (the first
    # session uses its own volume, as nothing earlier exists). Never uses a session's own future.
    PRIOR_SESSION_VOLUME = "prior_session_volume"
    # The contract with the most volume in the session itself (what a daily data vendor reports).
    SAME_SESSION_VOLUME = "same_session_volume"


class MaskReason(StrEnum):
    """Why a feature column is forced to 0 (and masked) for the given input."""

    TOP_OF_BOOK = "top_of_book"  # the book has the touch only: the column needs levels 2..10
    NO_TRADES = "no_trades"  # the rows have no trade records: the column needs traded volume

    @property
    def kind(self) -> str:
        """What the masked columns measure."""
        return {MaskReason.TOP_OF_BOOK: "book-depth", MaskReason.NO_TRADES: "volume/trade"}[self]

    @property
    def cause(self) -> str:
        """What the input lacks."""
        return {
            MaskReason.TOP_OF_BOOK: "top-of-book data: levels 2-10 absent",
            MaskReason.NO_TRADES: "no trade records: book-only data",
        }[self]
