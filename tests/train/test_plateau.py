"""Plateau handling: frozen-learner detection, the response ladder's order, and its pure functions."""

from __future__ import annotations

import pytest
import torch

from foxhunt.train.config import PlateauConfig
from foxhunt.train.plateau import (
    LADDER,
    PlateauDetector,
    PlateauResponder,
    Response,
    bump_lr,
    reset_momentum,
    shrink_perturb,
)

BRANCHES = ("direction", "magnitude", "order_type", "urgency")


def _stats(q: dict[str, tuple[float, float]], grad: float = 0.5) -> dict[str, float]:
    out = {"loss/total": 1.0, "grad/total": grad, "atoms/utilisation": 0.6}
    for b, (mean, spread) in q.items():
        out[f"q/{b}/mean"], out[f"q/{b}/spread"] = mean, spread
    return out


def _frozen_epoch(i: int) -> dict[str, float]:
    """Q statistics still (jitter 1e-4 relative), gradient non-zero: a frozen learner."""
    jitter = 1e-4 * (-1) ** i
    return _stats({b: (0.02 * (k + 1) * (1 + jitter), 0.3 * (1 - jitter)) for k, b in enumerate(BRANCHES)})


def _fires(detector: PlateauDetector, epochs: list[dict[str, float]]) -> list[int]:
    return [i for i, s in enumerate(epochs) if detector.update(s)]


def test_fires_on_a_frozen_learner_after_patience_epochs() -> None:
    det = PlateauDetector(patience=4, tolerance=0.01)
    # fires on the 5th epoch (4 unchanged epoch-to-epoch steps), then again 5 epochs later
    assert _fires(det, [_frozen_epoch(i) for i in range(12)]) == [4, 9]
    det = PlateauDetector.from_config(PlateauConfig(patience=0))
    assert _fires(det, [_frozen_epoch(i) for i in range(12)]) == []  # patience 0 = off


def test_does_not_fire_on_a_learning_or_a_dead_learner() -> None:
    det = PlateauDetector(patience=4, tolerance=0.01)
    moving = [_stats({b: (0.02 * 1.05**i, 0.3) for b in BRANCHES}) for i in range(30)]  # mean +5 %/epoch
    assert _fires(det, moving) == []
    one_branch = [
        _stats({"direction": (0.02, 0.3), "urgency": (0.1 * (1 + 0.02 * i), 0.3)}) for i in range(30)
    ]
    assert _fires(det, one_branch) == []  # a single branch still learning is progress
    dead = [{**_frozen_epoch(i), "grad/total": 0.0} for i in range(30)]
    assert _fires(det, dead) == []  # no gradient is not a plateau (nothing to perturb into motion)
    # a grad-less epoch in the middle restarts the window
    seq = [_frozen_epoch(i) for i in range(3)] + [{**_frozen_epoch(3), "grad/total": 0.0}]
    seq += [_frozen_epoch(i) for i in range(4, 9)]
    assert _fires(det, seq) == [8]


def test_tolerance_is_relative_to_the_branch_scale() -> None:
    # mean jittering by 1e-5 around zero with a spread of 0.5: frozen (the branch's scale is 0.5)
    near_zero = [_stats({"direction": (1e-5 * (-1) ** i, 0.5)}) for i in range(6)]
    assert _fires(PlateauDetector(patience=3, tolerance=0.01), near_zero) == [3]
    # the same jitter on a branch whose statistics are all ~1e-4 is a 10 % move: not frozen
    tiny = [_stats({"direction": (1e-4 + 1e-5 * (-1) ** i, 1e-4)}) for i in range(6)]
    assert _fires(PlateauDetector(patience=3, tolerance=0.01), tiny) == []


# --- pure functions ------------------------------------------------------------------------------


def _trained_adam() -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Adam]:
    torch.manual_seed(0)
    trunk, head = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)
    opt = torch.optim.Adam([*trunk.parameters(), *head.parameters()], lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        head(trunk(torch.randn(8, 3))).pow(2).mean().backward()
        opt.step()
    return trunk, head, opt


def test_reset_momentum_zeroes_exactly_the_given_params_state() -> None:
    trunk, head, opt = _trained_adam()
    before = {p: {k: v.clone() for k, v in opt.state[p].items()} for p in trunk.parameters()}
    assert reset_momentum(opt, head.parameters()) == 2
    for p in head.parameters():
        assert set(opt.state[p]) >= {"exp_avg", "exp_avg_sq", "step"}
        assert all(torch.count_nonzero(v) == 0 for v in opt.state[p].values())
    for p in trunk.parameters():  # untouched
        for k, v in opt.state[p].items():
            assert torch.equal(v, before[p][k]) and torch.count_nonzero(v) > 0
    # the next step is a fresh, bias-corrected Adam step: each head weight moves by lr * sign(g)
    w0 = head.weight.detach().clone()
    opt.zero_grad()
    head(trunk(torch.randn(8, 3))).pow(2).mean().backward()
    g = head.weight.grad.clone()
    opt.step()
    assert torch.allclose(head.weight - w0, -1e-2 * torch.sign(g), atol=1e-6)


def test_shrink_perturb_formula() -> None:
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    theta0 = [p.detach().clone() for p in params]
    shrink_perturb(params, 0.7, 0.05, torch.Generator().manual_seed(11))
    gen = torch.Generator().manual_seed(11)
    for p, t in zip(params, theta0, strict=True):
        eps = torch.randn(t.shape, generator=gen)
        assert torch.allclose(p, 0.7 * t + 0.05 * eps, atol=1e-7)
    # hand-worked: no noise halves the weights exactly
    p = torch.nn.Parameter(torch.tensor([2.0, -4.0, 0.5]))
    shrink_perturb([p], 0.5, 0.0, torch.Generator())
    assert p.tolist() == [1.0, -2.0, 0.25]


def test_bump_lr_survives_the_scheduler() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([p], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5)
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)
    bump_lr(opt, 3.0, sched)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.5e-3)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1.5e-3)  # base lr bumped too


# --- the ladder ----------------------------------------------------------------------------------


def test_ladder_order_and_reset_after_progress() -> None:
    trunk, head, opt = _trained_adam()
    rewinds: list[str] = []

    def rewind() -> str:
        rewinds.append("ring-2")
        return "ring checkpoint fold 0 epoch 7"

    cfg = PlateauConfig(shrink=0.5, perturb_std=0.0, temperature_boost=3.0, lr_bump=2.0)
    resp = PlateauResponder(
        cfg, opt, head.parameters(), generator=torch.Generator().manual_seed(0), rewind=rewind
    )
    assert LADDER == (
        Response.MOMENTUM_RESET,
        Response.SHRINK_PERTURB,
        Response.TEMPERATURE_BOOST,
        Response.LR_BUMP,
        Response.REWIND,
    )
    w0, lr0 = head.weight.detach().clone(), opt.param_groups[0]["lr"]
    actions = [resp.respond() for _ in range(6)]
    assert [a.response for a in actions] == [*LADDER, Response.NONE]
    assert [a.response.value for a in resp.history] == [
        "momentum_reset",
        "shrink_perturb",
        "temperature_boost",
        "lr_bump",
        "rewind",
        "none",
    ]
    assert all(torch.count_nonzero(v) == 0 for v in opt.state[head.weight].values())  # momentum reset
    assert all(torch.count_nonzero(v) > 0 for v in opt.state[trunk.weight].values())  # heads only
    assert torch.equal(head.weight, 0.5 * w0)  # shrink 0.5, no noise
    assert [a.temperature_multiplier for a in actions] == [1.0, 1.0, 3.0, 1.0, 1.0, 1.0]
    assert opt.param_groups[0]["lr"] == pytest.approx(2 * lr0)
    assert rewinds == ["ring-2"] and "fold 0 epoch 7" in actions[4].detail
    resp.note_progress()
    assert resp.respond().response is Response.MOMENTUM_RESET


def test_ladder_skips_rungs_configured_off() -> None:
    _, head, opt = _trained_adam()
    cfg = PlateauConfig(shrink=1.0, perturb_std=0.0, lr_bump=1.0)  # no shrink-perturb, no LR bump
    resp = PlateauResponder(cfg, opt, head.parameters(), generator=torch.Generator())  # no rewind
    got = [resp.respond().response for _ in range(3)]
    assert got == [Response.MOMENTUM_RESET, Response.TEMPERATURE_BOOST, Response.NONE]


def test_temperature_rung_is_skipped_when_exploration_has_no_temperature() -> None:
    """Boltzmann off (temperature 0): boosting it changes nothing, so the third plateau bumps the LR."""
    _, head, opt = _trained_adam()
    lr0 = opt.param_groups[0]["lr"]
    cfg = PlateauConfig(temperature_boost=3.0, lr_bump=2.0)
    resp = PlateauResponder(cfg, opt, head.parameters(), generator=torch.Generator(), temperature=0.0)
    got = [resp.respond() for _ in range(3)]
    assert [a.response for a in got] == [Response.MOMENTUM_RESET, Response.SHRINK_PERTURB, Response.LR_BUMP]
    assert all(a.temperature_multiplier == 1.0 for a in got)
    assert opt.param_groups[0]["lr"] == pytest.approx(2 * lr0)  # the third plateau did something
    # with a temperature the rung is taken as configured
    on = PlateauResponder(cfg, opt, head.parameters(), generator=torch.Generator(), temperature=0.5)
    assert [on.respond().response for _ in range(3)][-1] is Response.TEMPERATURE_BOOST


def test_injected_frozen_learner_gets_a_momentum_reset() -> None:
    """Detector and responder together, as the run loop wires them."""
    _, head, opt = _trained_adam()
    cfg = PlateauConfig(patience=3, tolerance=0.01)
    det = PlateauDetector.from_config(cfg)
    resp = PlateauResponder(cfg, opt, head.parameters(), generator=torch.Generator().manual_seed(1))
    applied = [(i, resp.respond().response) for i in range(10) if det.update(_frozen_epoch(i))]
    assert applied == [(3, Response.MOMENTUM_RESET), (7, Response.SHRINK_PERTURB)]
