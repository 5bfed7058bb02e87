"""The ofi row pass, slot group by slot group (foxhunt.features.ofi), with hand-worked numbers; the
carried state is one ROW_STATE record. The whole family is covered by tests/features/test_ofi.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from foxhunt.features import ofi
from foxhunt.features._kernels import Carry

S = {name: j for j, name in enumerate(ofi.SLOTS)}


def params(**over: float) -> np.void:
    p = ofi.row_params(0.25, ofi.OfiConfig())
    for k, v in over.items():
        p[k] = v
    return p


def fresh() -> np.void:
    return ofi.ROW_FRESH.copy()[0]


def one_row_book(bid_sz: list[float], ask_sz: list[float], bid_px: float = 100.0, ask_px: float = 100.25):
    L = len(bid_sz)
    return ofi.RowBook(
        bid_px=np.array([[bid_px - 0.25 * i for i in range(L)]]),
        bid_sz=np.array([bid_sz], np.float64),
        ask_px=np.array([[ask_px + 0.25 * i for i in range(L)]]),
        ask_sz=np.array([ask_sz], np.float64),
        bid_ct=np.array([[1.0] * L]),
        ask_ct=np.array([[2.0] * L]),
    )


def test_row_state_fields_keep_the_carried_layout() -> None:
    assert ofi.ROW_FRESH["fresh"][0] and ofi.ROW_FRESH["flow_fresh"][0]
    assert not ofi.ROW_FRESH["ev_ok"][0] and ofi.ROW_FRESH["x_fast"][0] == 0.0
    p = ofi.row_params(0.5, ofi.OfiConfig(depth_span=7, hawkes_slow_seconds=30.0))
    assert (p["tick"], p["n_depth"], p["tau_s"], p["clip"]) == (0.5, 7.0, 30.0, 10.0)


def test_ofi_slots_normalise_by_the_depth_ema() -> None:
    book = one_row_book([4.0] * 6, [2.0] * 6)  # D_i = (4 + 2) / 2 = 3 at a segment start
    e = np.array([[6.0, -3.0, 0.0, 0.0, 0.0, 1.5]])
    out = np.zeros((1, len(ofi.SLOTS)), np.float32)
    row = out[0]
    depth = np.zeros(6)
    st = fresh()
    ofi._ofi_slots(out, 0, book, e, depth, st, params())
    assert list(depth) == [3.0] * 6
    assert row[S["ofi_l0"]] == 2.0 and row[S["ofi_l1"]] == -1.0
    assert row[S["ofi_deep"]] == 0.5  # level 5 alone: 1.5 / 3
    assert row[S["ofi_total"]] == pytest.approx(4.5 / 18)
    assert row[S["ofi_accel"]] == 0.0 and st["x_fast"] == st["x_slow"] == pytest.approx(0.25)
    st["fresh"] = False
    e2 = np.array([[0.0] * 6])
    ofi._ofi_slots(out, 0, book, e2, depth, st, params(n_fast=2.0))
    assert row[S["ofi_accel"]] == pytest.approx(-0.25)  # X - EMA_fast(X)_{t-1}
    assert st["x_fast"] == pytest.approx(0.125) and row[S["ofi_ema_fast"]] == pytest.approx(0.125)


def test_flow_slots_by_hand() -> None:
    out = np.zeros((1, len(ofi.SLOTS)), np.float32)
    row = out[0]
    st = fresh()
    p = params(n_bucket=2.0, n_tox=2.0)
    ofi._flow_slots(out, 0, 3.0, 1.0, 4.0, st, p)
    # B = 3, S = 1, V = 4; VPIN = |3 - 1| / 4
    assert row[S["vpin"]] == 0.5 and row[S["toxicity_gradient"]] == 0.0
    assert row[S["aggression"]] == 0.25 and row[S["aggression_row"]] == 0.25
    assert row[S["trade_flow"]] == 0.5  # (B - S) / D_0 = 2 / 4
    assert not st["flow_fresh"]
    ofi._flow_slots(out, 0, 0.0, 2.0, 4.0, st, p)
    # B = 1.5, S = 1.5, V = 3; EMA(|B - S|) = 2 + (0 - 2)/2 = 1, EMA(V) = 4 + (3 - 4)/2 = 3.5
    assert row[S["vpin"]] == pytest.approx(1 / 3.5)
    assert row[S["toxicity_gradient"]] == pytest.approx(-1 / 3.5)
    assert row[S["aggression"]] == 0.0 and row[S["aggression_row"]] == -0.5 and row[S["trade_flow"]] == 0.0


def test_vol_and_event_slots() -> None:
    out = np.zeros((1, len(ofi.SLOTS)), np.float32)
    row = out[0]
    st = fresh()
    ofi._vol_slots(out, 0, 4.0, st, params())
    assert row[S["realised_vol"]] == 2.0 and row[S["vol_regime"]] == 0.0
    st["fresh"] = False
    ofi._vol_slots(out, 0, 0.0, st, params(n_vf=2.0, n_vs=4.0))  # fast 2, slow 3
    assert row[S["vol_regime"]] == pytest.approx(-1 / 5)
    for name, value in (("ev_lf", 2.0), ("ev_ls", 1.0), ("ev_sf", 0.3), ("ev_ss", -0.1), ("ev_t", 10**9)):
        st[name] = value
    ofi._event_slots(out, 0, 2_000_000_000, st, params(tau_f=1.0, tau_s=60.0))
    rf, rs = 2.0 * math.exp(-1.0), math.exp(-1 / 60)
    assert row[S["hawkes_rate"]] == pytest.approx(math.log1p(rf))
    assert row[S["hawkes_ratio"]] == pytest.approx((rf - rs) / (rf + rs), rel=1e-6)
    assert row[S["l1_imbalance_ema"]] == pytest.approx(0.3)
    assert row[S["l1_imbalance_ema_slow"]] == pytest.approx(-0.1)


def test_book_and_queue_slots() -> None:
    book = one_row_book([3.0, 1.0], [1.0, 1.0], bid_px=100.0, ask_px=100.5)
    out = np.zeros((1, len(ofi.SLOTS)), np.float32)
    row = out[0]
    st = fresh()
    w = np.array([1.0, 0.5])
    cnt = ofi._book_slots(out, 0, book, w, st, params())
    assert cnt == 6.0 and row[S["order_count_imbalance"]] == pytest.approx(-2 / 6)
    assert row[S["book_pressure"]] == pytest.approx(2.0 / 5.0)  # (1 (3 - 1) + .5 (1 - 1)) / (1 4 + .5 2)
    assert row[S["spread_ticks"]] == 2.0 and row[S["spread_change"]] == 0.0 and row[S["spread_dev"]] == 0.0
    # microprice = (100 * 1 + 100.5 * 3) / 4 = 100.375, mid 100.25
    assert row[S["microprice_residual"]] == pytest.approx(0.125 / 100.25)
    ofi._queue_slots(out, 0, 3.0, 1.0, cnt, st, params())
    assert row[S["queue_depletion_asym"]] == 0.5 and row[S["order_count_flux"]] == 0.0
    st["fresh"] = False
    ofi._queue_slots(out, 0, 0.0, 0.0, 9.0, st, params(n_fast=2.0, n_depth=3.0))
    assert row[S["queue_depletion_asym"]] == 0.5  # both EMAs halve
    assert row[S["order_count_flux"]] == pytest.approx(3.0 / 7.0)  # (9 - 6) / (6 + (9 - 6)/3)


def test_carry_record_is_carried_in_place() -> None:
    carry = Carry()
    st = carry.record("row_pass", ofi.ROW_FRESH)
    st["x_fast"] = 1.5
    assert carry.record("row_pass", ofi.ROW_FRESH)["x_fast"] == 1.5  # the same state next time
    assert ofi.ROW_FRESH["x_fast"][0] == 0.0  # the fresh record is left as it was
