"""Device replay: sum tree, prioritised sampling, n-step transitions (foxhunt.agent.replay)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foxhunt.agent.replay import (
    FlatPriorities,
    NStep,
    PrioritizedReplay,
    PriorityIndex,
    SumTree,
    nstep_returns,
    transition_fields,
)
from foxhunt.domain.actions import BRANCHES, BranchConfig
from foxhunt.features.layout import STATE_LAYOUT

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
INDEXES = [PriorityIndex.TREE, PriorityIndex.FLAT]


def simple_fields() -> dict:
    return {"x": ((), torch.float32), "v": ((2,), torch.int64)}


def items(values: list[float] | np.ndarray) -> dict[str, torch.Tensor]:
    x = torch.as_tensor(np.asarray(values, dtype=np.float32))
    return {"x": x, "v": torch.stack([x.long(), -x.long()], 1)}


# --- n-step returns ---------------------------------------------------------------------------------


def test_nstep_returns_hand_worked():
    # n = 3, gamma = 0.5; column 0 ends an episode at t = 2, column 1 never does.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0], [5.0, 1.0]])
    dones = torch.tensor([[0, 0], [0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    ret, disc = nstep_returns(rewards, dones, gamma=0.5, n=3)
    # t=0: 1 + .5*2 + .25*3 = 2.75 (done at t=2 inside: discount 0); t=1: 2 + .5*3 = 3.5; t=2: 3
    # t=3: 4 + .5*5 = 6.5 (sequence ends after 2 steps: bootstrap .25); t=4: 5 (bootstrap .5)
    assert ret[:, 0].tolist() == [2.75, 3.5, 3.0, 6.5, 5.0]
    assert disc[:, 0].tolist() == [0.0, 0.0, 0.0, 0.25, 0.5]
    # no done: 1 + .5 + .25 = 1.75 with discount .125 until the tail truncates
    assert ret[:, 1].tolist() == [1.75, 1.75, 1.75, 1.5, 1.0]
    assert disc[:, 1].tolist() == [0.125, 0.125, 0.125, 0.25, 0.5]


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_accumulator_equals_nstep_returns(n):
    T, N, W, gamma = 13, 6, 4, 0.9
    g = torch.Generator().manual_seed(n)
    rewards = torch.randn(T, N, generator=g)
    dones = torch.rand(T, N, generator=g) < 0.2
    states = torch.randn(T + 1, N, W, generator=g)
    actions = torch.randint(0, 3, (T, N, 4), generator=g)
    aux = torch.randn(T, N, 3, generator=g)
    valid = torch.rand(T, N, generator=g) < 0.9
    acc = NStep(N, n, gamma)
    outs = []
    for t in range(T):
        out = acc.push(states[t], actions[t], rewards[t], dones[t], states[t + 1], aux[t], valid=valid[t])
        assert (out is None) == (t < n - 1)
        if out is not None:
            outs.append(out)
    tail = acc.flush()
    assert tail is not None and tail["reward"].shape == ((n - 1) * N,) if n > 1 else tail is None
    got = {k: torch.cat([o[k] for o in outs] + ([tail[k]] if tail else [])) for k in outs[0]}
    ret, disc = nstep_returns(rewards, dones, gamma, n)
    torch.testing.assert_close(got["reward"].view(T, N), ret)
    torch.testing.assert_close(got["discount"].view(T, N), disc)
    assert torch.equal(got["state"].view(T, N, W), states[:T])
    assert torch.equal(got["action"].view(T, N, 4), actions)
    assert torch.equal(got["aux"].view(T, N, 3), aux)
    assert torch.equal(got["valid"].view(T, N), valid)
    # next_state is the state n steps later (sequence end for the tail) wherever it is used
    later = states[torch.clamp(torch.arange(T) + n, max=T)]
    used = disc > 0
    assert torch.equal(got["next_state"].view(T, N, W)[used], later[used])
    assert acc.flush() is None  # flush empties it


@pytest.mark.parametrize("device", DEVICES)
def test_nstep_decision_windows_hand_worked(device):
    """Windows that stop at the next decision state (slot 0 of the state > 0.5), gamma = 1/2, n = 4.

    env 0: s0 free, s1 s2 locked, s3 s4 free (a plan entered at t=0 exits before s3)
    env 1: never reaches a stop state (a plan longer than the window)
    env 2: its episode ends with step 1 (discount 0 from then on)
    Rewards are t + 1 at step t for every env.
    """
    states = torch.tensor(
        [
            [[1.0, 0], [1, 0], [1, 0]],
            [[0, 1], [0, 1], [0, 1]],
            [[0, 2], [0, 2], [1, 2]],
            [[1, 3], [0, 3], [0, 3]],
            [[1, 4], [0, 4], [0, 4]],
        ]
    ).to(device)  # [t, env, W]; slot 1 is t, to read back which state a window bootstraps from
    acc = NStep(3, 4, 0.5, device, stop=lambda s: s[:, 0] > 0.5)
    outs = []
    for t in range(4):
        done = torch.tensor([False, False, t == 1], device=device)
        out = acc.push(
            states[t],
            torch.zeros(3, 1, device=device),
            torch.full((3,), t + 1.0, device=device),
            done,
            states[t + 1],
            torch.zeros(3, 1, device=device),
        )
        if out is not None:
            outs.append(out)
    outs.append(acc.flush())
    got = {k: torch.cat([o[k] for o in outs]).cpu() for k in ("reward", "discount")}
    bootstrap_t = torch.cat([o["next_state"][:, 1] for o in outs]).cpu()
    # window start t = 0, 1, 2, 3 (rows of 3 envs each)
    want_reward = [
        1 + 2 / 2 + 3 / 4,
        1 + 2 / 2 + 3 / 4 + 4 / 8,
        1 + 2 / 2,  # t=0: env 0 stops at s3
        2 + 3 / 2,
        2 + 3 / 2 + 4 / 4,
        2,  # t=1: env 2 ends with this step
        3,
        3 + 4 / 2,
        3 + 4 / 2,  # t=2: env 0 stops at s3 at once
        4,
        4,
        4,  # t=3
    ]
    want_discount = [1 / 8, 1 / 16, 0, 1 / 4, 1 / 8, 0, 1 / 2, 1 / 4, 1 / 4, 1 / 2, 1 / 2, 1 / 2]
    torch.testing.assert_close(got["reward"], torch.tensor(want_reward))
    torch.testing.assert_close(got["discount"], torch.tensor(want_discount))
    used = got["discount"] > 0
    want_from = torch.tensor([3.0, 4, 2, 3, 4, 2, 3, 4, 4, 4, 4, 4])
    assert torch.equal(bootstrap_t[used], want_from[used])


def test_nstep_without_stop_states_is_plain_nstep():
    """A stop predicate that never fires gives the plain n-step transitions exactly."""
    T, N, W, n, gamma = 9, 5, 3, 4, 0.9
    g = torch.Generator().manual_seed(1)
    rewards, dones = torch.randn(T, N, generator=g), torch.rand(T, N, generator=g) < 0.2
    states = torch.randn(T + 1, N, W, generator=g)
    plain, never = NStep(N, n, gamma), NStep(N, n, gamma, stop=lambda s: s[:, 0] > 1e9)
    for t in range(T):
        args = (states[t], torch.zeros(N, 1), rewards[t], dones[t], states[t + 1], torch.zeros(N, 1))
        a, b = plain.push(*args), never.push(*args)
        if a is not None:
            assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = plain.flush(), never.flush()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nstep_rejects_wrong_env_count():
    acc = NStep(4, 3, 0.99)
    with pytest.raises(ValueError, match="built for 4 envs"):
        acc.push(
            torch.zeros(5, 2),
            torch.zeros(5, 4),
            torch.zeros(5),
            torch.zeros(5),
            torch.zeros(5, 2),
            torch.zeros(5, 3),
        )


# --- sum tree ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity", [1, 2, 8, 1024])
def test_sum_tree_total_and_find_match_numpy(capacity, device):
    rng = np.random.default_rng(capacity)
    prio = rng.integers(0, 5, capacity).astype(np.float64)  # integers: every sum is exact
    prio[rng.random(capacity) < 0.3] = 0.0
    prio[-1] = 0.0 if capacity > 1 else 1.0  # a trailing empty leaf must never be returned
    if prio.sum() == 0:
        prio[0] = 1.0
    tree = SumTree(capacity, device)
    tree.update(torch.arange(capacity, device=device), torch.as_tensor(prio, device=device))
    assert tree.total().item() == prio.sum()
    cum = np.cumsum(prio)
    x = np.concatenate([rng.random(500) * prio.sum(), cum[cum < prio.sum()], [0.0]])  # incl. boundaries
    got = tree.find(torch.as_tensor(x, device=device)).cpu().numpy()
    np.testing.assert_array_equal(got, np.searchsorted(cum, x, side="right"))
    assert (prio[got] > 0).all()
    # at or past the total (rounding): the last non-empty leaf, not an empty one
    edge = tree.find(torch.tensor([prio.sum(), prio.sum() * 1.001], device=device)).cpu().numpy()
    assert (edge == np.flatnonzero(prio)[-1]).all()


def test_sum_tree_internal_nodes_are_exact_sums_after_random_updates():
    rng = np.random.default_rng(1)
    tree = SumTree(64)
    ref = np.zeros(64)
    for _ in range(20):
        idx = rng.integers(0, 64, 40)  # with duplicates
        val = rng.random(40)
        tree.update(torch.as_tensor(idx), torch.as_tensor(val))
        for i, v in zip(idx, val, strict=True):  # sequential reference: the last write wins
            ref[i] = v
    np.testing.assert_array_equal(tree.leaves.numpy(), ref)
    t = tree.tree.numpy()
    np.testing.assert_array_equal(t[1:64], t[2:128:2] + t[3:128:2])
    np.testing.assert_allclose(tree.total().item(), ref.sum(), rtol=1e-12)


def test_sum_tree_set_range_equals_update():
    a, b = SumTree(16), SumTree(16)
    vals = torch.arange(1.0, 8.0, dtype=torch.float64)
    a.set_range(5, vals)
    b.update(torch.arange(5, 12), vals)
    assert torch.equal(a.tree, b.tree)
    with pytest.raises(ValueError, match="outside"):
        a.set_range(12, vals)
    with pytest.raises(ValueError, match="power of 2"):
        SumTree(12)


# --- flat priorities ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("capacity", [1, 2, 8, 1024])
def test_flat_priorities_sample_matches_numpy_and_the_tree(capacity, device):
    rng = np.random.default_rng(capacity)
    prio = rng.integers(0, 5, capacity).astype(np.float64)  # integers: every sum is exact
    prio[rng.random(capacity) < 0.3] = 0.0
    prio[-1] = 0.0 if capacity > 1 else 1.0  # a trailing empty leaf must never be returned
    if prio.sum() == 0:
        prio[0] = 1.0
    flat, tree = FlatPriorities(capacity, device), SumTree(capacity, device)
    for index in (flat, tree):
        index.update(torch.arange(capacity, device=device), torch.as_tensor(prio, device=device))
    assert flat.total().item() == prio.sum()
    cum = np.cumsum(prio)
    x = np.concatenate([rng.random(500) * prio.sum(), cum[cum < prio.sum()], [0.0]])  # incl. boundaries
    fractions = torch.as_tensor(x / prio.sum(), device=device)
    got, p = flat.sample(fractions)
    x = (x / prio.sum()) * prio.sum()  # the draw's own product, rounded as sample() rounds it
    np.testing.assert_array_equal(got.cpu().numpy(), np.searchsorted(cum, x, side="right"))
    np.testing.assert_allclose(p.cpu().numpy(), prio[got.cpu().numpy()] / prio.sum())
    assert torch.equal(got, tree.sample(fractions)[0])
    # at or past the total (rounding): the last non-empty leaf, not an empty one
    edge, _ = flat.sample(torch.tensor([1.0, 1.001], device=device, dtype=torch.float64))
    assert (edge.cpu().numpy() == np.flatnonzero(prio)[-1]).all()


@pytest.mark.parametrize("index", INDEXES)
def test_draws_on_a_uniform_grid_hit_each_leaf_in_proportion_to_its_priority(index):
    """The exact expectation: draws at fractions spread evenly over [0, 1) land on leaf ``i`` in
    exactly the share ``p_i / sum p`` (priorities 1, 0, 3, 2, 0, 2 of total 8; 80 draws: 10 per unit)."""
    prio = torch.tensor([1.0, 0.0, 3.0, 2.0, 0.0, 2.0, 0.0, 0.0], dtype=torch.float64)
    pri = index.build(8, torch.device("cpu"))
    pri.set_range(0, prio)
    idx, p = pri.sample((torch.arange(80, dtype=torch.float64) + 0.5) / 80)
    assert torch.bincount(idx, minlength=8).tolist() == [10, 0, 30, 20, 0, 20, 0, 0]
    assert torch.equal(p, prio[idx] / 8.0)


def test_flat_priorities_last_write_wins_and_range_checks():
    flat = FlatPriorities(8)
    flat.update(torch.tensor([3, 3, 5, 3]), torch.tensor([1.0, 4.0, 2.0, 7.0]))
    assert flat.leaves.tolist() == [0, 0, 0, 7, 0, 2, 0, 0]
    flat.set_range(6, torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert flat.total().item() == 11.0
    with pytest.raises(ValueError, match="outside"):
        flat.set_range(7, torch.ones(2, dtype=torch.float64))


def test_auto_index_is_flat_on_small_cpu_buffers_and_a_tree_on_large_ones():
    from foxhunt.agent.replay import FLAT_CPU_MAX_CAPACITY

    cpu = torch.device("cpu")
    assert isinstance(PriorityIndex.AUTO.build(FLAT_CPU_MAX_CAPACITY, cpu), FlatPriorities)
    assert isinstance(PriorityIndex.AUTO.build(2 * FLAT_CPU_MAX_CAPACITY, cpu), SumTree)
    assert isinstance(PriorityIndex.TREE.build(8, cpu), SumTree)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("index", INDEXES)
def test_sample_and_update_inside_a_cuda_graph(index):
    """Captured once (as ``Agent.learn`` captures them), every replay draws afresh from the registered
    generator with the PER distribution and weights, and writes the priorities it is given."""
    alpha, beta, batch, replays = 0.7, 0.5, 50, 200
    rb = PrioritizedReplay(8, simple_fields(), alpha=alpha, beta=beta, eps=0.0, device="cuda", index=index)
    rb.add({k: v.cuda() for k, v in items(range(8)).items()})
    td = torch.arange(1.0, 9.0, device="cuda")
    rb.update_priorities(torch.arange(8, device="cuda"), td)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def step():
        data, idx, w = rb.sample(batch, gen)
        rb.update_priorities(idx, td[idx])  # the same priorities until td changes below
        return data, idx, w

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        data, idx, w = step()
    p = td.double().cpu() ** alpha
    draws = []
    for _ in range(replays):
        graph.replay()
        draws.append(idx.cpu())
        assert torch.equal(data["x"], idx.float())
        want = p[draws[-1]] ** -beta
        torch.testing.assert_close(w.cpu(), (want / want.max()).float())
    assert len({tuple(d.tolist()) for d in draws}) > 10  # not one draw replayed
    counts = np.bincount(torch.cat(draws).numpy(), minlength=8)
    expected = replays * batch * (p / p.sum()).numpy()
    assert ((counts - expected) ** 2 / expected).sum() < 24.3  # chi-square, 7 dof, 99.9%
    td.fill_(2.0)  # the next replay writes (2 + 0)^0.7 into the slots it draws
    graph.replay()
    torch.testing.assert_close(rb.priorities.leaves[idx].cpu(), torch.full((batch,), 2.0**alpha).double())


# --- prioritised replay -----------------------------------------------------------------------------


def test_capacity_rounds_up_and_fields_are_checked():
    rb = PrioritizedReplay(5, simple_fields())
    assert rb.capacity == 8 and len(rb) == 0
    with pytest.raises(KeyError, match="missing"):
        rb.add({"x": torch.zeros(3)})
    with pytest.raises(ValueError, match="field 'v' has shape"):
        rb.add({"x": torch.zeros(3), "v": torch.zeros(3, 3, dtype=torch.int64)})
    with pytest.raises(ValueError, match="empty replay"):
        rb.sample(4)


@pytest.mark.parametrize("index", INDEXES)
def test_sampling_frequencies_follow_priorities(index):
    alpha = 0.7
    rb = PrioritizedReplay(8, simple_fields(), alpha=alpha, beta=0.5, eps=0.0, index=index)
    rb.add(items(range(8)))
    td = torch.arange(1.0, 9.0)
    rb.update_priorities(torch.arange(8), td)
    gen = torch.Generator().manual_seed(0)
    counts = np.zeros(8)
    draws, batch = 100, 500
    for _ in range(draws):
        data, idx, _ = rb.sample(batch, gen)
        assert torch.equal(data["x"], idx.float())  # the rows are the slots' contents
        counts += np.bincount(idx.numpy(), minlength=8)
    p = td.numpy() ** alpha
    expected = draws * batch * p / p.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 24.3  # the 99.9% quantile of chi-square with 7 degrees of freedom


@pytest.mark.parametrize("index", INDEXES)
def test_importance_weights_formula(index):
    alpha, beta = 0.5, 0.4
    rb = PrioritizedReplay(16, simple_fields(), alpha=alpha, beta=beta, eps=0.01, index=index)
    rb.add(items(range(10)))
    td = torch.linspace(0.1, 3.0, 10)
    rb.update_priorities(torch.arange(10), td)
    _, idx, w = rb.sample(64, torch.Generator().manual_seed(3))
    p = (td.double().abs() + 0.01) ** alpha
    P = p / p.sum()
    expected = (10 * P[idx]) ** -beta
    torch.testing.assert_close(w, (expected / expected.max()).float())
    assert w.max().item() == 1.0 and w.dtype == torch.float32
    # beta override: 0 = no correction
    _, _, w0 = rb.sample(16, torch.Generator().manual_seed(3), beta=0.0)
    assert torch.equal(w0, torch.ones(16))


@pytest.mark.parametrize("index", INDEXES)
def test_update_priorities_duplicates_last_write_wins_and_max_priority(index):
    rb = PrioritizedReplay(8, simple_fields(), alpha=1.0, eps=0.0, index=index)
    rb.add(items(range(6)))
    assert torch.equal(rb.priorities.leaves[:6], torch.ones(6, dtype=torch.float64))  # max priority 1
    rb.update_priorities(torch.tensor([3, 3, 5, 3]), torch.tensor([1.0, 4.0, 2.0, -7.0]))
    assert rb.priorities.leaves[3].item() == 7.0  # |td| of the last write to slot 3
    assert rb.priorities.leaves[5].item() == 2.0
    assert rb.max_priority.item() == 7.0
    rb.add(items([6.0]))  # a new item enters with the running max
    assert rb.priorities.leaves[6].item() == 7.0
    assert rb.priorities.total().item() == 1 + 1 + 1 + 7 + 1 + 2 + 7
    rb.update_priorities(torch.tensor([0]), torch.tensor([float("nan")]))  # a NaN td gets the max
    assert rb.priorities.leaves[0].item() == 7.0


@pytest.mark.parametrize("index", INDEXES)
def test_invalid_rows_are_stored_but_never_sampled(index):
    rb = PrioritizedReplay(8, simple_fields(), index=index)
    batch = items(range(8)) | {"valid": torch.tensor([True, False] * 4)}
    rb.add(batch)
    assert len(rb) == 8
    _, idx, _ = rb.sample(256, torch.Generator().manual_seed(0))
    assert (idx % 2 == 0).all()


@pytest.mark.parametrize("index", INDEXES)
def test_ring_overwrite(index):
    rb = PrioritizedReplay(4, simple_fields(), index=index)
    rb.add(items([0, 1, 2]))
    rb.add(items([3, 4, 5]))  # wraps: slots 0, 1 overwritten by 4, 5
    assert len(rb) == 4
    assert rb.storage["x"].tolist() == [4, 5, 2, 3]
    assert rb.storage["v"][:, 1].tolist() == [-4, -5, -2, -3]
    rb.add(items(range(10, 19)))  # more than the capacity in one batch: the last 4 stay, in order
    assert sorted(rb.storage["x"].tolist()) == [15, 16, 17, 18]
    assert rb.storage["x"][rb._cursor - 1].item() == 18  # the newest sits just before the cursor
    assert rb.priorities.total().item() == 4.0


@pytest.mark.parametrize("index", INDEXES)
def test_clear(index):
    rb = PrioritizedReplay(8, simple_fields(), alpha=1.0, eps=0.0, index=index)
    rb.add(items(range(5)))
    rb.update_priorities(torch.tensor([1]), torch.tensor([9.0]))
    rb.clear()
    assert len(rb) == 0 and rb.priorities.total().item() == 0.0 and rb.max_priority.item() == 1.0
    with pytest.raises(ValueError, match="empty replay"):
        rb.sample(2)
    rb.add(items([42.0]))
    assert rb.storage["x"][0].item() == 42.0 and rb.priorities.total().item() == 1.0
    _, idx, _ = rb.sample(8)
    assert (idx == 0).all()


@pytest.mark.parametrize("added", [5, 11])  # partly filled, wrapped
@pytest.mark.parametrize("index", INDEXES)
def test_state_dict_round_trip(added, index):
    rb = PrioritizedReplay(8, simple_fields(), alpha=0.6, eps=0.01, index=index)
    rb.add(items(range(added)))
    rb.update_priorities(torch.tensor([0, 2, 4]), torch.tensor([5.0, 0.5, 2.0]))
    state = rb.state_dict()
    assert all(v.is_contiguous() for v in state.values())
    copy = PrioritizedReplay(8, simple_fields(), alpha=0.6, eps=0.01, index=index)
    copy.load_state_dict(state)
    assert len(copy) == len(rb)
    a = rb.sample(32, torch.Generator().manual_seed(7))
    b = copy.sample(32, torch.Generator().manual_seed(7))
    if added <= 8:  # same layout: identical draws
        assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
        assert torch.equal(copy.priorities.leaves, rb.priorities.leaves)
    # same contents and priorities either way (a wrapped ring is re-laid oldest first)
    order = lambda r: torch.argsort(r.storage["x"][: len(r)])  # noqa: E731
    for r in (rb, copy):
        assert r.storage["x"][: len(r)][order(r)].tolist() == list(range(max(added - 8, 0), added))
    torch.testing.assert_close(rb.priorities.leaves[order(rb)], copy.priorities.leaves[order(copy)])
    rb.add(items([100.0]))
    copy.add(items([100.0]))  # the next add overwrites the oldest item in both
    assert sorted(rb.storage["x"].tolist()) == sorted(copy.storage["x"].tolist())


def test_state_dict_into_smaller_buffer_keeps_newest():
    rb = PrioritizedReplay(8, simple_fields())
    rb.add(items(range(11)))
    small = PrioritizedReplay(4, simple_fields())
    small.load_state_dict(rb.state_dict())
    assert small.storage["x"].tolist() == [7, 8, 9, 10] and len(small) == 4
    with pytest.raises(KeyError, match="other fields"):
        PrioritizedReplay(8, {"x": ((), torch.float32)}).load_state_dict(rb.state_dict())


@pytest.mark.parametrize("index", INDEXES)
def test_same_seed_same_sample(index):
    rb = PrioritizedReplay(64, simple_fields(), index=index)
    rb.add(items(range(50)))
    rb.update_priorities(torch.arange(50), torch.rand(50, generator=torch.Generator().manual_seed(1)))
    a = rb.sample(40, torch.Generator().manual_seed(5))
    b = rb.sample(40, torch.Generator().manual_seed(5))
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("branches", [BranchConfig(), BranchConfig(direction=3)])
def test_nstep_into_replay_with_the_transition_record(device, branches):
    sizes = torch.tensor([branches.direction, branches.magnitude, branches.order_type, branches.urgency])
    W, N = STATE_LAYOUT.width, 16
    rb = PrioritizedReplay(128, transition_fields(W, len(BRANCHES)), device=device)
    acc = NStep(N, 3, 0.99, device)
    g = torch.Generator(device=device).manual_seed(0)
    obs = torch.randn(N, W, device=device, generator=g)
    for t in range(6):
        act = (torch.rand(N, len(BRANCHES), device=device, generator=g) * sizes.to(device)).long()
        nxt = obs + 1
        out = acc.push(
            obs,
            act,
            torch.full((N,), float(t), device=device),
            torch.zeros(N, device=device),
            nxt,
            torch.zeros(N, 3, device=device),
        )
        if out is not None:
            rb.add(out)
        obs = nxt
    rb.add(acc.flush())
    assert len(rb) == 6 * N
    data, idx, w = rb.sample(32, g)
    assert set(data) == {"state", "action", "reward", "discount", "next_state", "aux"}
    assert (data["action"] < sizes.to(device)).all()
    # each step adds 1 to the state, so a three-step transition's next state is its state + 3
    full = (data["discount"] - 0.99**3).abs() < 1e-6  # three whole steps (the flushed tail has fewer)
    torch.testing.assert_close(data["next_state"][full], data["state"][full] + 3)
