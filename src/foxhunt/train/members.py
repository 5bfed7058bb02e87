"""Members: one run trains ``train.members`` agents on its market and each fold reports their committee.

Seed-to-seed variance is the largest error of a trained agent on the planted markets: one smoke seed
captures anywhere from -18% to 88% of the reference rule's edge
(docs/results/2026-12-02-thompson-off-trade-slot.md). The argmax of
several independently trained agents' mean E[Q] (:func:`foxhunt.agent.committee.committee_decision`)
averages that noise away: over four blocks of 8-11 fresh smoke seeds the blocks' committees captured
36-48% against their members' 22-32%, and 8 smoke seeds trained at once on one H200 (371 s) voted
67% against their mean 29%. A GPU has the room to train the members at once; ``train.members`` makes
the committee the run's own result, so ``foxhunt run``, ``seeds``, ``backtest`` and the report all
read it.

How a run with K members trains (:class:`MemberRuns`, driven by :func:`foxhunt.train.run.train`, which
hands it the one-member training :func:`foxhunt.train.run.train_member`: this module imports no
training loop, so the run and its members form no import circle):

- **member 0** is the run itself: its seed, its folder, its progress, hooks and resume, exactly the
  run that ``train.members = 1`` makes (tested: its checkpoints are the same bytes);
- **member m** (1 <= m < K) is a run of its own in ``OUT/members/m<m>`` with ``run.seed + m x``
  :data:`foxhunt.seeding.MEMBER_STRIDE` (no other packaged or studied seed comes near, so two
  studies' members never coincide) and ``train.members = 1``; ``train.member_workers - 1`` of them
  train at once in spawned processes while member 0 trains in this one (spawned, not forked: a fork
  of a process that started torch's threads can deadlock), on the run's device;
- **each fold's result** is then the committee of the members' reported checkpoints of that fold,
  judged over the fold's whole validation period by training's own :func:`~foxhunt.train.evaluation.validate`
  (as ``foxhunt backtest --checkpoint A --checkpoint B ...`` judges them: tested equal). Member 0's
  history, diagnostics and baselines stay; its own numbers and every member's move to
  ``committee.member_results``. Nothing is picked on validation: every member votes.
"""

from __future__ import annotations

import multiprocessing
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from foxhunt.config.loader import with_overrides
from foxhunt.config.models import FoxhuntConfig
from foxhunt.seeding import member_seed

if TYPE_CHECKING:
    from foxhunt.agent.committee import MeanValues

MEMBERS_DIR = "members"
"""The folder, inside a run's, of its members 1 .. K-1 (``m1``, ``m2`` ...)."""
COMMITTEE_KEY = "committee"
"""A committee fold's record of its members (``folds.json``, ``metrics.json``)."""
MEMBER_METRICS = ("net_pnl", "gross_pnl", "costs", "trades", "sharpe_annual", "capture")
"""What ``committee.member_results`` keeps of each member's own fold result."""


def member_config(cfg: FoxhuntConfig, member: int) -> FoxhuntConfig:
    """Member ``member``'s config: the run's with its own seed and ``train.members = 1``."""
    update = {"run.seed": member_seed(cfg.run.seed, member), "train.members": 1}
    return with_overrides(cfg, update, where="train.members")


def member_folder(run_dir: Path, member: int) -> Path:
    """Member ``member``'s run folder (member 0's is the run's own)."""
    return run_dir if member == 0 else run_dir / MEMBERS_DIR / f"m{member}"


TrainMember = Callable[[FoxhuntConfig, Path, Path, str | None, bool], int]
"""``(member config, its folder, the cache path, planted, resume) -> its fold count``: a module-level
function (a spawned process runs it), :func:`foxhunt.train.run.train_member`."""


class MemberRuns:
    """Members 1 .. K-1 of a run, each trained by ``train``. :meth:`start` launches the ones that train
    beside member 0 (in spawned processes); :meth:`finish` trains the rest here, one after the other,
    and waits for them all."""

    def __init__(
        self,
        cfg: FoxhuntConfig,
        run_dir: Path,
        cache_path: Path,
        planted: str | None,
        *,
        resume: bool,
        train: TrainMember,
    ) -> None:
        self.train = train
        k = cfg.train.members
        self.jobs = [
            (member_config(cfg, m), member_folder(run_dir, m), Path(cache_path).absolute(), planted, resume)
            for m in range(1, k)
        ]
        at_once = cfg.train.member_workers or k
        self.spawned = min(max(at_once - 1, 0), len(self.jobs))  # member 0 is this process's
        self._pool: ProcessPoolExecutor | None = None
        self._futures: list[Future] = []
        if not resume:  # a fresh run: no member of an earlier run in this folder is resumed as its own
            shutil.rmtree(run_dir / MEMBERS_DIR, ignore_errors=True)

    @property
    def folders(self) -> list[Path]:
        return [job[1] for job in self.jobs]

    def start(self) -> None:
        """Launch the members that train beside member 0 (once: a second call does nothing)."""
        if self.spawned == 0 or self._pool is not None:
            return
        ctx = multiprocessing.get_context("spawn")
        self._pool = ProcessPoolExecutor(max_workers=self.spawned, mp_context=ctx)
        self._futures = [self._pool.submit(self.train, *job) for job in self.jobs[: self.spawned]]

    def finish(self) -> None:
        try:
            for job in self.jobs[self.spawned :]:
                self.train(*job)
            for f in self._futures:
                f.result()  # a member's error is the run's
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> MemberRuns:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: object) -> None:
        """Leaving the run: on an error (member 0's guard, an interruption) the members still training
        are stopped, not waited for (minutes of work whose committee will never be judged)."""
        if kind is not None:
            self.stop()
        self.close()

    def stop(self) -> None:
        """Stop the members still training (terminated, not waited for) and the pool."""
        if self._pool is not None:
            # CPython's pool keeps its worker processes here (no public terminate before 3.14).
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
        self.close()


class Judged(NamedTuple):
    """A committee judged over one fold's validation period (:func:`judge_committee`)."""

    metrics: dict[str, Any]  # training's validate: the committee's validation metrics
    record: Any  # its step record (StepRecord)
    fold: Any  # the fold's data (FoldData)
    market: Any  # the fold's market (MarketTensors), as training built it
    values: MeanValues  # the members' mean E[Q]: what the committee takes its argmax of


def judge_committee(cache, cfg: FoxhuntConfig, files: list[Path], folds: list, device) -> Judged:
    """The committee of ``files`` (checkpoints of one fold) over that fold's whole validation period,
    its market built as training builds it and judged by training's own ``validate``. ``folds``: the
    cache's folds (``make_folds``). Each member's agent is loaded once, for the policy and the values."""
    from foxhunt.agent.committee import MeanValues
    from foxhunt.backtest.run import bars_per_year
    from foxhunt.env.market import market_tensors
    from foxhunt.policy.trained import CommitteePolicy, committee_policy
    from foxhunt.train.evaluation import validate

    committee = CommitteePolicy(files, cfg)
    fd = folds[committee.fold]
    market = market_tensors(cache, fd, vol_window=cfg.env.plan.barrier.vol_window, device=device)
    agents = [m.agent(device) for m in committee.members]
    metrics, rec = validate(market, fd, cfg, committee_policy(agents), bars_per_year(cache))
    return Judged(metrics, rec, fd, market, MeanValues([a.policy for a in agents]))


def committee_folds(
    cache,  # FeatureCache
    cfg: FoxhuntConfig,
    run_dir: Path,
    own: list[dict[str, Any]],
    members: list[Path],
    device,
    say: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Each fold's result as the committee of member 0's (``own``: the run's ``folds.json``) and the
    ``members``' reported checkpoints: its validation numbers, action shares, capture and equity
    curve are the committee's; ``committee`` records the members (seeds, files relative to
    ``run_dir``, each member's own numbers)."""
    import json

    from foxhunt.backtest.capture import fold_capture
    from foxhunt.report.schema import CALIBRATION_KEY
    from foxhunt.report.series import equity_series
    from foxhunt.train.diagnostics import fold_calibration
    from foxhunt.train.evaluation import action_shares, validation_net
    from foxhunt.validation.folds import make_folds

    reports = [own] + [json.loads((m / "folds.json").read_text()) for m in members]
    folders = [run_dir, *members]
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    ts, horizon = cache.column("ts"), cfg.env.plan.barrier.horizon
    result = []
    for k, fold in enumerate(own):
        files = [folder / rep[k]["checkpoint_file"] for folder, rep in zip(folders, reports, strict=True)]
        judged = judge_committee(cache, cfg, files, folds, device)
        metrics, rec, fd = judged.metrics, judged.record, judged.fold
        say(f"fold {k + 1}/{len(own)}: committee of {len(files)} members: net {metrics['net_pnl']:+,.0f}")
        body = {**fold, **{key: v for key, v in metrics.items() if key != "all"}}
        body["capture"] = fold_capture(body)
        # where the committee's entries paid, on the values it acts on (member 0's own is in `fold`)
        body[CALIBRATION_KEY] = fold_calibration(judged.values, judged.market, cfg.env, fd.fold, horizon)
        body["actions"] = action_shares(metrics["all"], cfg)
        agent = equity_series({"agent": validation_net(rec, fd, cfg)}, ts, fd.fold.validation_start)["agent"]
        body["equity"] = {**fold["equity"], "agent": agent}
        body[COMMITTEE_KEY] = {
            "members": len(files),
            "seeds": [member_seed(cfg.run.seed, m) for m in range(len(files))],
            "files": [str(f.relative_to(run_dir)) for f in files],
            "member_results": [
                {"member": m, **{key: rep[k].get(key) for key in MEMBER_METRICS}}
                for m, rep in enumerate(reports)
            ],
        }
        result.append(body)
    return result
