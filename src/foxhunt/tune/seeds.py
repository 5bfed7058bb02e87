"""One profile trained over a list of seeds: the spread that tells a learned edge from a lucky start.

``foxhunt seeds`` builds (or reuses) one feature cache, trains it once per seed in parallel (Ray
tasks, or spawned processes without Ray: :func:`train_one_seed` is a pure function of its arguments,
so a task calls it per seed as it is) and writes ``seeds.json`` and ``seeds.png``: per seed and fold
the validation net PnL, trades and Sharpe; the reference rule, flat and long per fold
(:func:`foxhunt.backtest.reference.edge`); each seed's capture per fold beside its ratio over the
folds where the rule made money (:class:`foxhunt.backtest.reference.Capture`: a fold where the rule
lost is excluded and named, its PnL still shown); the mean, standard error and 95% interval of the
seeds' ratios; the median of every seed's kept folds' captures with a distribution-free 95% interval
(:func:`median_interval`); the ratio over every fold as reported before issue 58
(``capture_all_folds``); how many seeds beat flat; execution (:mod:`foxhunt.backtest.execution`):
per seed and fold the agent's and the rule's blocks, per seed both pooled over its folds, and for the
study the agent pooled over every finished seed's folds beside the rule over one seed's (the rule is
the same in every seed: its counts are one run's), the committee's beside them.

A seed whose run the anomaly guard stops is a result (``stopped``: the diagnosis), not the end of
the study; it enters neither the capture statistics nor the seeds that beat flat.

What a study keeps of its seeds' checkpoints is :class:`foxhunt.outputs.Keep`: every one (each
fold's ring, its last and best: a fold can be resumed or rewound), or only those that voted (each
fold's reported checkpoint, every member's where a seed trained several), which is what the study's
numbers and a later ``foxhunt backtest --checkpoint`` read. Each smoke checkpoint holds its replay
buffer (~77 MB), so a smoke seed keeps ~700 MB under ``all`` and ~230 MB under ``reported``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats

from foxhunt.backtest.capture import RULE, Capture, FoldCapture
from foxhunt.backtest.execution import EXECUTION_KEY, folds_execution, pool_execution
from foxhunt.config.models import Device, FoxhuntConfig
from foxhunt.errors import FoxhuntError
from foxhunt.parallel.resources import tally
from foxhunt.tracking import TrackingTarget, nested_run
from foxhunt.train.members import COMMITTEE_KEY

SEEDS_FILE = "seeds.json"
SEEDS_PLOT = "seeds.png"
INTERVAL_LEVEL = 0.95
COMMITTEE_SEED = -1
"""The ``seed`` of a study's committee result (:func:`committee_result`): no run has it."""


@dataclass
class SeedFold:
    """One fold of one seed: the agent's validation numbers and the baselines' net PnL."""

    fold: int
    net_pnl: float
    trades: int
    sharpe_annual: float
    flat: float
    long: float
    rule: float | None
    execution: dict[str, Any] | None = None  # the agent's execution block (None: an older seeds.json)
    rule_execution: dict[str, Any] | None = None  # the reference rule's (None: no rule)


@dataclass
class SeedResult:
    seed: int
    folds: list[SeedFold] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str | None = None  # the anomaly guard's diagnosis when it stopped the run
    device: str | None = None  # where it trained (foxhunt.parallel.resources.placement)

    @property
    def total(self) -> float | None:
        return None if self.stopped else sum(f.net_pnl for f in self.folds)

    @property
    def captures(self) -> Capture | None:
        """Every fold's capture, the ratio over the folds where the rule made money, their median and the
        all-fold ratio (None: stopped)."""
        if self.stopped:
            return None
        return Capture(tuple(FoldCapture(f.fold, f.net_pnl, f.rule) for f in self.folds))

    @property
    def capture(self) -> float | None:
        """Agent / rule net PnL summed over the folds where the rule made money (None: stopped, or no
        such fold); the folds where it lost are excluded (:attr:`captures` names them)."""
        return c.ratio if (c := self.captures) is not None else None

    @property
    def capture_all_folds(self) -> float | None:
        """Agent / rule net PnL summed over every fold, rule-losing ones included (None: stopped, no rule
        in a fold, or the summed rule made <= 0): the capture as reported before issue 58."""
        return c.all_folds if (c := self.captures) is not None else None

    @property
    def execution(self) -> dict[str, dict[str, Any] | None]:
        """The agent's and the rule's execution blocks pooled over this seed's folds."""
        folds = [
            {EXECUTION_KEY: f.execution, "baselines": {RULE: {EXECUTION_KEY: f.rule_execution}}}
            for f in self.folds
        ]
        return folds_execution(folds) if folds else {"agent": None, "rule": None}

    @property
    def beats_flat(self) -> bool | None:
        if self.stopped:
            return None
        return sum(f.net_pnl for f in self.folds) > sum(f.flat for f in self.folds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "folds": [asdict(f) for f in self.folds],
            "total": self.total,
            "capture": self.capture,
            # Derived from folds, like capture: per fold, the kept folds' median, exclusions, all folds.
            "captures": c.to_dict() if (c := self.captures) is not None else None,
            "capture_all_folds": self.capture_all_folds,
            "beats_flat": self.beats_flat,
            EXECUTION_KEY: self.execution,  # derived from folds: agent and rule pooled over them
            "seconds": round(self.seconds, 1),
            "stopped": self.stopped,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> SeedResult:
        """A seed read back from ``seeds.json`` (the inverse of :meth:`to_dict`)."""
        folds = [SeedFold(**f) for f in body["folds"]]
        return cls(
            int(body["seed"]),
            folds,
            seconds=float(body["seconds"]),
            stopped=body["stopped"],
            device=body.get("device"),  # absent from a seeds.json of an older foxhunt
        )


def with_seed(cfg: FoxhuntConfig, seed: int) -> FoxhuntConfig:
    """``cfg`` with ``run.seed = seed`` (validated, as ``--set run.seed=...`` would give)."""
    body = cfg.model_dump(mode="json")
    body["run"]["seed"] = seed
    return FoxhuntConfig.model_validate(body)


def seed_fold(fold: dict[str, Any]) -> SeedFold:
    """The numbers a seeds study keeps of one training fold result (``train()``'s list items)."""
    base = fold["baselines"]
    rule = base.get(RULE)
    return SeedFold(
        fold=int(fold["fold"]),
        net_pnl=float(fold["net_pnl"]),
        trades=int(fold["trades"]),
        sharpe_annual=float(fold["sharpe_annual"]),
        flat=float(base["flat"]["net_pnl"]),
        long=float(base["long"]["net_pnl"]),
        rule=float(rule["net_pnl"]) if rule else None,
        execution=fold.get(EXECUTION_KEY),
        rule_execution=rule.get(EXECUTION_KEY) if rule else None,
    )


def seed_folder(out: Path, seed: int) -> Path:
    """The run folder of one seed inside a seeds study's folder ``out``."""
    return out / f"seed{seed}"


def train_one_seed(
    cfg: FoxhuntConfig,
    seed: int,
    out: Path,
    cache_path: Path,
    planted: str | None = None,
    tracking: TrackingTarget | None = None,
) -> SeedResult:
    """Train ``cfg`` with ``run.seed = seed`` on the cache file into ``out`` (a run folder of its own);
    ``planted``: the planted signal's state column, for the per-epoch direction-gap diagnostic;
    ``tracking``: the study's MLflow run to nest this seed's run under (None: not tracked).

    Pure in its arguments (everything it reads is passed in, nothing is shared with the caller), so a
    process pool or a Ray task can run it per seed."""
    from foxhunt.dataset.cache import load_cache
    from foxhunt.parallel.resources import placement
    from foxhunt.train.guard import AnomalyError
    from foxhunt.train.run import resolve_device, train

    cfg = with_seed(cfg, seed)
    t0 = time.perf_counter()
    # The GPU Ray placed this seed on (each task sees its own as cuda:0): seeds.json shows the spread.
    device = placement(str(resolve_device(cfg)))
    cache = load_cache(cache_path, cfg)
    try:
        # The seeds command claimed the parent folder (refused unless --overwrite): a seed folder left
        # there by an earlier study is replaced, not resumed.
        with nested_run(tracking, out.name, cfg, command="seeds", out=out, tags={"foxhunt.seed": seed}) as tr:
            hook = tr.epoch_hook()
            folds = train(cache, cfg, out, overwrite=True, log=lambda _: None, planted=planted, on_epoch=hook)
            tr.log_folds(folds, out)
    except AnomalyError as err:
        return SeedResult(seed, seconds=time.perf_counter() - t0, stopped=str(err), device=device)
    return SeedResult(seed, [seed_fold(f) for f in folds], seconds=time.perf_counter() - t0, device=device)


def committee_result(
    cache_path: Path, cfg: FoxhuntConfig, runs: list[Path], device: str = "cpu"
) -> SeedResult | None:
    """The committee of the runs' reported checkpoints (every member's: :func:`voters`), fold by fold
    (:class:`~foxhunt.policy.trained.CommitteePolicy`: the argmax of the seeds' mean E[Q]) judged on
    each fold's validation rows as the runs judged their own agents; its ``seed`` is -1. ``runs``:
    finished seed folders of one study (``folds.json`` and the checkpoints it names). None with fewer
    than two runs.

    No member, epoch or weight is picked on validation: every finished seed's reported agent votes,
    so the committee's numbers are as honest as each seed's."""
    import json

    from foxhunt.dataset.cache import load_cache
    from foxhunt.train.members import judge_committee
    from foxhunt.validation.folds import make_folds

    if len(runs) < 2:
        return None
    t0 = time.perf_counter()
    reports = [json.loads((r / "folds.json").read_text()) for r in runs]
    cache = load_cache(cache_path, cfg)
    folds = make_folds(cache.features(), cache.columns, cfg.folds, int(cache.meta["label_span"]))
    result = SeedResult(COMMITTEE_SEED)
    for k, fold in enumerate(reports[0]):
        files = [run / f for run, rep in zip(runs, reports, strict=True) for f in voters(rep[k])]
        metrics = judge_committee(cache, cfg, files, folds, device).metrics
        own = ("net_pnl", "trades", "sharpe_annual", EXECUTION_KEY)  # the committee's, the rest the fold's
        result.folds.append(seed_fold(fold | {key: metrics[key] for key in own}))
    result.seconds = time.perf_counter() - t0
    return result


def voters(fold: dict[str, Any]) -> list[str]:
    """A run's checkpoints that vote for one fold, relative to its folder: every member's where the run
    trained several (``train.members``), else its reported checkpoint."""
    members = fold.get(COMMITTEE_KEY)
    return list(members["files"]) if members else [fold["checkpoint_file"]]


def prune_checkpoints(run: Path) -> tuple[int, int]:
    """Delete the checkpoints of a finished seed's run folder ``run`` that no fold's :func:`voters`
    name (the folds' ring entries, and ``last`` or ``best`` where the other was reported), in every
    ``checkpoints`` folder under ``run`` (its members' too); return how many files and bytes. A run without
    ``folds.json`` (stopped by the anomaly guard) is left as it is: nothing says what it reported."""
    from foxhunt.policy.checkpoint import checkpoint_files

    report = run / "folds.json"
    if not report.is_file():
        return 0, 0
    folds = json.loads(report.read_text())
    kept = {f.resolve() for fold in folds for v in voters(fold) for f in checkpoint_files(run / v)}
    files = size = 0
    for folder in sorted(run.rglob("checkpoints")):
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.suffix in (".safetensors", ".json") and file.resolve() not in kept:
                files, size = files + 1, size + file.stat().st_size
                file.unlink()
    return files, size


def interval(values: list[float], level: float = INTERVAL_LEVEL) -> dict[str, Any]:
    """Mean, standard error (sd / sqrt(n), sd with n - 1) and the Student-t interval of ``values``.

    With fewer than two values the standard error and interval are undefined (None)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "se": None, "lo": None, "hi": None, "level": level}
    mean = sum(values) / n
    if n < 2:
        return {"n": 1, "mean": mean, "se": None, "lo": None, "hi": None, "level": level}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return {"n": n, "mean": mean, "se": se, "lo": mean - half, "hi": mean + half, "level": level}


def median_interval(values: list[float], level: float = INTERVAL_LEVEL) -> dict[str, Any]:
    """The median of ``values`` and its distribution-free interval: the order statistics ``x_(j)`` and
    ``x_(n+1-j)`` (sorted, 1-based) with ``j`` the largest for which ``P(Binomial(n, 1/2) < j) <=
    (1 - level) / 2``, so the interval covers the median with probability >= ``level`` whatever the
    values' distribution, if they are independent draws of one. None where no ``j >= 1`` qualifies
    (fewer than 6 values at 95%). ``coverage``: the interval's exact coverage, ``1 - 2 P(B < j)``."""
    n = len(values)
    xs = sorted(values)
    median = float(statistics.median(xs)) if xs else None
    out: dict[str, Any] = {"n": n, "median": median, "lo": None, "hi": None, "level": level, "coverage": None}
    tail = (1.0 - level) / 2.0
    j = 0  # P(B < j) = cdf(j - 1); the largest j with cdf(j - 1) <= tail, 0 where even j = 1 fails
    while j < n // 2 and float(stats.binom.cdf(j, n, 0.5)) <= tail:
        j += 1
    if j >= 1:
        coverage = 1.0 - 2.0 * float(stats.binom.cdf(j - 1, n, 0.5))
        out |= {"lo": xs[j - 1], "hi": xs[n - j], "coverage": coverage}
    return out


def fold_capture_summary(done: list[SeedResult]) -> dict[str, Any]:
    """Every (seed, fold) capture of the finished seeds, pooled: their median and its interval
    (:func:`median_interval`), the median per fold over the seeds, and the folds kept out (the rule
    lost or was absent: each with its reason, its rule net PnL and the seeds it was excluded in).

    The pooled interval treats the seed-fold captures as independent; a fold's seeds share its
    market period, so it is narrower than one that allowed for that (the per-fold medians show how
    far the folds differ)."""
    seen = [(r.seed, cap) for r in done if (cap := r.captures) is not None]
    by_fold, excluded = [], []
    for k in sorted({f.fold for _, cap in seen for f in cap.folds}):
        here = [(seed, f) for seed, cap in seen for f in cap.folds if f.fold == k]
        kept = [x for _, f in here if f.excluded is None and (x := f.capture) is not None]
        median = float(statistics.median(kept)) if kept else None
        by_fold.append({"fold": k, "n": len(kept), "median": median})
        for why in sorted({f.excluded for _, f in here if f.excluded is not None}):
            out = [(seed, f) for seed, f in here if f.excluded is why]
            excluded.append(
                {
                    "fold": k,
                    "excluded": why.value,
                    "why": why.text,
                    "rule_net_pnl": sorted({f.rule for _, f in out if f.rule is not None}),
                    "agent_net_pnl": [f.agent for _, f in out],
                    "seeds": [seed for seed, _ in out],
                }
            )
    pooled = [x for _, cap in seen for x in cap.kept_captures]
    return median_interval(pooled) | {"by_fold": by_fold, "excluded": excluded}


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _span(body: dict[str, Any]) -> str:
    return f" [{body['lo']:.0%}, {body['hi']:.0%}]" if body.get("lo") is not None else ""


def capture_text(cap: Capture | None) -> str:
    """One seed's capture as the printed table shows it: every fold's (an excluded fold by why, with
    both net PnLs), the ratio and median over the kept folds, and the ratio over every fold."""
    if cap is None:
        return "capture n/a"
    per = " / ".join(
        _share(f.capture)
        if f.excluded is None
        else f"excluded ({f.excluded.value}: agent {f.agent:+,.0f}, rule "
        + ("n/a" if f.rule is None else f"{f.rule:+,.0f}")
        + ")"
        for f in cap.folds
    )
    return (
        f"capture {_share(cap.ratio)} (per fold {per}; median {_share(cap.median)}; "
        f"all folds {_share(cap.all_folds)})"
    )


def capture_lines(summary: dict[str, Any]) -> list[str]:
    """A study's capture as the printed table ends (the body of ``seeds.json``): the seeds' ratios
    over the folds where the rule made money, the pooled seed-fold median and its interval, the median
    per fold, the folds excluded and why, and the ratio over every fold as reported before issue 58."""
    c, pooled, old = summary["capture"], summary["capture_per_fold"], summary["capture_all_folds"]
    level = f"{pooled['level']:.0%}"
    folds = ", ".join(f"fold {f['fold']} {_share(f['median'])} (n={f['n']})" for f in pooled["by_fold"])
    lines = [
        f"capture (agent / rule over the folds where the rule made money): mean {_share(c['mean'])}"
        f"{_span(c)} over {c['n']} seeds",
        f"capture per seed-fold: median {_share(pooled['median'])}{_span(pooled)} over {pooled['n']} "
        f"({level} distribution-free interval{'' if pooled['lo'] is not None else ': too few'}); "
        f"median per fold: {folds or 'none'}",
    ]
    for e in pooled["excluded"]:
        rule = " / ".join(f"{r:+,.0f}" for r in e["rule_net_pnl"]) or "n/a"
        agent = " / ".join(f"{a:+,.0f}" for a in e["agent_net_pnl"])
        seeds = ",".join(map(str, e["seeds"]))
        lines.append(f"excluded: fold {e['fold']} of seeds {seeds}: {e['why']} (rule {rule}; agent {agent})")
    lines.append(
        f"capture over every fold (as reported before issue 58, rule-losing folds included): mean "
        f"{_share(old['mean'])}{_span(old)} over {old['n']} seeds"
    )
    return lines


def study_execution(done: list[SeedResult], committee: SeedResult | None = None) -> dict[str, Any]:
    """The study's execution: the agent's blocks pooled over every finished seed's folds, the reference
    rule's over the first finished seed's (every seed runs the same rule on the same folds), the
    committee's over its folds (None: no committee)."""
    seeds = [r.execution for r in done]
    agent = [s["agent"] for s in seeds]
    return {
        "agent": pool_execution(agent) if agent and all(agent) else None,
        "rule": seeds[0]["rule"] if seeds else None,
        "committee": committee.execution["agent"] if committee is not None else None,
    }


def summarise_seeds(
    results: list[SeedResult], reference: dict[str, Any] | None, committee: SeedResult | None = None
) -> dict[str, Any]:
    """The body of ``seeds.json`` (module docstring); ``committee``: the finished seeds' committee
    (:func:`committee_result`), kept apart from the seeds' statistics."""
    done = [r for r in results if not r.stopped]
    captures = [c for c in (r.capture for r in done) if c is not None]
    return {
        "committee": committee.to_dict() if committee is not None else None,
        "seeds": [r.to_dict() for r in results],
        "reference": reference,
        # Each seed's ratio over the folds where the rule made money (the headline), every seed-fold's
        # capture pooled (median and interval, per fold, the folds excluded and why), and each seed's
        # ratio over every fold as reported before issue 58 (rule-losing folds in the sums).
        "capture": interval(captures) | {"undefined_seeds": [r.seed for r in done if r.capture is None]},
        "capture_per_fold": fold_capture_summary(done),
        "capture_all_folds": interval([c for r in done if (c := r.capture_all_folds) is not None])
        | {"undefined_seeds": [r.seed for r in done if r.capture_all_folds is None]},
        "net_pnl_total": interval([r.total for r in done if r.total is not None]),
        "beats_flat": sum(bool(r.beats_flat) for r in done),
        EXECUTION_KEY: study_execution(done, committee),
        "finished": len(done),
        "stopped": [r.seed for r in results if r.stopped],
        "devices": tally(r.device for r in results),
    }


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values, floats to 1e-9 relative: each part's process computes the reference rule
    again, and a summation order is not promised across processes."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def merge_studies(parts: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """One study from the ``seeds.json`` bodies of studies of one config over disjoint seeds.

    ``parts``: (file, body) pairs. A study too long for one sitting (an 8-seed GPU measurement under a
    10-minute command limit) runs as several; the merged body is what one ``foxhunt seeds`` over all
    the seeds would have written: :func:`summarise_seeds` of every seed, in the parts' order. Parts
    that differ in profile, overrides or reference rule are not one study and are refused."""
    if not parts:
        raise FoxhuntError("seeds.json", "no studies to merge", "pass at least one seeds.json")
    first_path, first = parts[0]
    seen: set[int] = set()
    for path, body in parts:
        for key in ("profile", "sets", "reference"):
            if not _same(body.get(key), first.get(key)):
                raise FoxhuntError(
                    path, f"its {key} differs from {first_path}'s", "merge only studies of one config"
                )
        seeds = {int(s["seed"]) for s in body["seeds"]}
        if seeds & seen:
            raise FoxhuntError(path, f"seeds {sorted(seeds & seen)} are in two parts", "merge disjoint seeds")
        seen |= seeds
    results = [SeedResult.from_dict(s) for _, body in parts for s in body["seeds"]]
    return summarise_seeds(results, first["reference"]) | {
        "profile": first.get("profile"),
        "sets": first.get("sets"),
        "parts": [str(p) for p, _ in parts],
    }


def run_seeds(
    cfg: FoxhuntConfig,
    cache_path: Path,
    seeds: list[int],
    out: Path,
    *,
    workers: int = 1,
    planted: str | None = None,
    tracking: TrackingTarget | None = None,
    address: str | None = None,
    say: Callable[[str], None] = print,
) -> list[SeedResult]:
    """:func:`train_one_seed` for every seed, ``workers`` at once as tasks of
    :func:`foxhunt.parallel.open_executor` (an embedded Ray, the cluster at ``address``, or spawned
    processes without Ray); seed order.

    On CUDA each seed declares its share of the GPUs (one GPU and 4 workers: a quarter each), so Ray
    places several small seeds on one GPU, and on as many GPUs as the cluster has."""
    from foxhunt.parallel import Resources, gpu_share, open_executor

    # Absolute paths: a Ray worker's working folder is not necessarily this process's.
    out, cache_path = Path(out).absolute(), Path(cache_path).absolute()
    jobs = [(cfg, s, seed_folder(out, s), cache_path, planted, tracking) for s in seeds]
    with open_executor(min(workers, len(seeds)), address=address, say=say) as ex:
        gpus = gpu_share(ex.gpus, ex.workers) if cfg.run.device is not Device.CPU else 0.0
        return ex.map(train_one_seed, jobs, Resources(gpus=gpus))
