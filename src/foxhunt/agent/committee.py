"""A committee of trained agents acting as one greedy policy: the mean of their E[Q].

Agents trained on the same rows from different seeds disagree most where each fitted noise: one
seed's greedy direction follows a feature the others ignore. Averaging their expected returns before
the argmax keeps what they share (the planted edge) and shrinks what each invented, the variance
reduction of bagging without resampling (Breiman 1996; Lakshminarayanan et al. 2017 for deep
ensembles). Measured on the smoke market (docs/results/2026-12-03-smoke-target-committee.md): committees of
8 or 11 fresh
seeds' agents captured 36-48% of the reference rule where their members averaged 22-32%; without
weight decay, or with 4 members, a committee can do worse than its members.

For K members with per-branch E[Q] ``Q_b^k [N, A_b]`` in real units (dollars; each member's PopArt
de-normalises its own):

    Qbar_b = (1/K) sum_k Q_b^k                    the committee's E[Q]
    a_b    = argmax_A (Qbar_b - margin_b)         margin_b = (1/K) sum_k margin_b^k (the entry margin)

and the sizing inputs are the members' own, each taken at the committee's actions and averaged:
conviction_k = top2gap(Qbar_b) / (2 q_gap_k) (the committee's gap in member k's running unit), the
Q-variance of member k's distribution of the chosen direction, member k's aux predictions. A
committee of one is that agent's greedy policy, bit for bit.

**The branch curriculum** (``agent.curriculum``) holds an execution branch at its default choice for
a fold's first epochs; a member's held branches are those of the epoch its checkpoint was saved at
(:meth:`foxhunt.policy.trained.CheckpointPolicy.agent`). A member abstains on a branch it holds (its
head there never learned: DQN replayed only the default, PPO masked the branch out of its loss):

    Qbar_b = sum_k f_b^k Q_b^k / sum_k f_b^k      f_b^k = 1 where member k has released branch b, else 0
    a_b    = the held default                     where no member has released b

so a committee whose members all hold a branch acts there as each of them does (Full, Market,
Normal), and the members that learned a branch decide it alone (:func:`held_vote`).

This module is the committee's one home: its rule (:func:`mean_values`, :class:`MeanValues`,
:func:`held_vote`, :func:`committee_decision`). The rest only call it: :mod:`foxhunt.policy.trained`
loads checkpoints into it, :mod:`foxhunt.train.members` trains a run's members and judges each fold's
committee, :func:`foxhunt.tune.seeds.committee_result` judges a seed study's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from foxhunt.agent import explore as ex
from foxhunt.agent.actor import Actor, PolicyOut


def mean_values(values: Sequence[Sequence[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """``Qbar_b = (1/K) sum_k Q_b^k`` per branch: ``values[k][b]`` is member k's E[Q] of branch b.
    K = 1: 0 + q then / 1 are exact, so one member's values come back to the bit."""
    k = float(len(values))
    return tuple(sum(v[i] for v in values) / k for i in range(len(values[0])))


class MeanValues:
    """The members' mean E[Q] per branch, as :meth:`foxhunt.agent.actor.Actor.expected_q` gives one
    policy's: the values the committee takes its argmax of (:func:`mean_values`)."""

    def __init__(self, actors: Sequence[Actor]) -> None:
        self.actors = actors

    def expected_q(self, states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return mean_values([actor.expected_q(states) for actor in self.actors])


def held_vote(
    values: Sequence[Sequence[torch.Tensor]], held: Sequence[torch.Tensor]
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The curriculum's committee values (module docstring): per branch b the mean of the members that
    have released it, ``sum_k f_b^k Q_b^k / sum_k f_b^k``, or the plain mean where every member holds
    it; and bool ``[B]``, the branches every member holds. ``values[k][b]``: member k's values of branch
    b; ``held[k]``: member k's bool ``[B]`` mask (on the device: no host read)."""
    free_KB = torch.stack([~h for h in held]).to(values[0][0].dtype)  # f_b^k
    n_B = free_KB.sum(0)  # sum_k f_b^k
    plain = mean_values(values)
    voted = []
    for b in range(len(plain)):
        released = sum(free_KB[k, b] * v[b] for k, v in enumerate(values)) / n_B[b].clamp(min=1)
        voted.append(torch.where(n_B[b] > 0, released, plain[b]))
    return tuple(voted), n_B == 0


@torch.no_grad()
def committee_decision(members: Sequence[Actor], states: torch.Tensor) -> PolicyOut:
    """The committee's greedy decision for ``states`` ``[N, W]`` (module docstring)."""
    if not members:
        raise ValueError("a committee needs at least one agent")
    values = [m.greedy_values(states) for m in members]
    # K = 1: mean_values and the means below are exact, so one member decides as its agent to the bit
    k = float(len(members))
    branches = len(values[0][1])
    mean_q = mean_values([qs for _, qs in values])
    acting = [m.acting_q(qs) for m, (_, qs) in zip(members, values, strict=True)]
    if any(m.curriculum is not None for m in members):  # agent.curriculum: abstain on a held branch
        held = [m.held for m in members]
        mean_q, _ = held_vote([qs for _, qs in values], held)
        voted, all_held = held_vote(acting, held)
        choice = torch.stack([ex.greedy(q) for q in voted], dim=1)
        acts = torch.where(all_held, members[0].held_at, choice)
    else:
        acts = torch.stack([ex.greedy(sum(a[i] for a in acting) / k) for i in range(branches)], dim=1)
    parts = [m.decision(out, mean_q, acts) for m, (out, _) in zip(members, values, strict=True)]
    return PolicyOut(
        actions=acts,
        direction_conviction=sum(p.direction_conviction for p in parts) / k,
        magnitude_conviction=sum(p.magnitude_conviction for p in parts) / k,
        q_variance=sum(p.q_variance for p in parts) / k,
        aux=sum(p.aux for p in parts) / k,
        q_gap=parts[0].q_gap,  # top2gap(Qbar) of the direction: the same in every part
    )
