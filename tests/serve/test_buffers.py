"""The session buffers (foxhunt.serve.buffers): appended rows read back as one array, and a reserved
buffer never moves (a row close copies nothing), with the doubling fallback where the system refuses
the reservation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from foxhunt.data.arrays import TradeArrays
from foxhunt.serve import buffers
from foxhunt.serve.buffers import Appended, Grown


def _trades(lo: int, n: int) -> TradeArrays:
    ts = np.arange(lo, lo + n, dtype=np.int64)
    return TradeArrays(
        ts_event=ts,
        ts_recv=ts + 1,
        instrument_id=np.full(n, 7, np.uint32),
        price=ts.astype(np.float64) * 0.25,
        size=np.ones(n, np.int64),
        side=np.full(n, ord("B"), np.uint8),
        flags=np.zeros(n, np.uint8),
        sequence=np.arange(n, dtype=np.uint32),
    )


def _chunks() -> list[int]:
    return [0, 1, 5, 1000, 3, 2048, 1, 700]


def test_appended_rows_are_the_chunks_in_order_and_the_reserved_buffer_never_moves() -> None:
    app, lo, first = Appended(), 0, None
    for n in _chunks():
        app.append(_trades(lo, n))
        lo += n
        if first is None:
            first = app.buffers["price"]
        assert app.buffers["price"] is first  # reserved at the first append: no row is ever copied
    rows = app.rows()
    np.testing.assert_array_equal(rows.ts_event, np.arange(lo))
    np.testing.assert_array_equal(rows.price, np.arange(lo) * 0.25)
    assert not rows.price.flags.writeable
    app.truncate(10)
    assert len(app.rows()) == 10


@pytest.mark.parametrize("refused", [False, True], ids=["small-reservation", "reservation-refused"])
def test_a_buffer_past_its_reservation_doubles_and_the_views_before_stay_valid(
    monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    if refused:  # strict overcommit or `ulimit -v`: the mapping fails, the buffer starts small and doubles

        def refuse(nbytes: int) -> np.ndarray:
            raise OSError(12, "Cannot allocate memory")

        monkeypatch.setattr(buffers, "_mapped", refuse)
    else:
        monkeypatch.setattr(buffers, "RESERVE_BYTES", 64)
    app, grown, lo, views = Appended(), Grown(np.int64), 0, []
    for n in _chunks():
        app.append(_trades(lo, n))
        grown.append(np.arange(lo, lo + n))
        lo += n
        views.append(app.rows())
    assert len(app.buffers["price"]) < 100_000  # it grew by doubling, not at once
    np.testing.assert_array_equal(app.rows().ts_event, np.arange(lo))
    np.testing.assert_array_equal(grown.rows(), np.arange(lo))
    for view in views:  # a view handed out before a doubling still reads the rows it had
        np.testing.assert_array_equal(view.ts_event, np.arange(len(view)))


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="needs Linux's /proc/self/smaps")
@pytest.mark.skipif(not buffers.reserves(), reason="strict overcommit here: buffers reserve nothing")
def test_the_reservation_is_advised_out_of_huge_pages_and_uses_no_memory_until_written() -> None:
    buf = buffers.allocate(10, (10,), np.float64)
    assert buf.nbytes >= buffers.RESERVE_BYTES // 2  # reserved, not the 10 rows asked for
    start = buf.__array_interface__["data"][0]
    buf[:1000] = 1.0
    entry = _smaps_entry(start)
    assert "nh" in entry["VmFlags"].split()  # MADV_NOHUGEPAGE: no compaction stall at a first write
    # MAP_NORESERVE: not charged to the commit count (a hundred live buffers charged a hundred GB)
    assert "nr" in entry["VmFlags"].split()
    assert int(entry["Rss"].split()[0]) < 1024  # kB: the pages written, not the reservation


def _smaps_entry(address: int) -> dict[str, str]:
    """The fields of the mapping that holds ``address`` in /proc/self/smaps."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):  # a mapping's header line: lo-hi perms ...
            if inside:
                break
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    assert fields, f"no mapping holds {address:#x}"
    return fields


def test_under_strict_overcommit_a_buffer_reserves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # vm.overcommit_memory 2 charges even a MAP_NORESERVE map: a reservation would take a gigabyte
    # of the commit limit that every allocation of the machine shares.
    monkeypatch.setattr(buffers, "reserves", lambda: False)
    assert len(buffers.allocate(10, (10,), np.float64)) == buffers._FIRST
    assert len(buffers.allocate(5000, (), np.int64)) == 5000
