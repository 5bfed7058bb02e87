"""The stages in front of every study, written once: leak guard -> features -> alpha check.

``foxhunt run`` (:func:`foxhunt.job.run_job`) chains them all; ``foxhunt alpha``, ``train``,
``seeds`` and ``tune`` (:mod:`foxhunt.cli`) run the guard and the features, and ``alpha`` the check
too. Each entry point calls these functions rather than its own copy, so no command can guard its
data differently from the job (another step name, no verdict line) or score other alpha horizons.
The features stage is :func:`foxhunt.dataset.build.get_or_build` itself.

Imports of the stages' code stay inside the functions: the command line imports this module when a
command runs, and ``foxhunt --help`` must not wait for them (tests/test_cli.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from foxhunt.console import SILENT, Reporter

if TYPE_CHECKING:
    from foxhunt.alpha.check import AlphaResult
    from foxhunt.config.models import FoxhuntConfig
    from foxhunt.dataset.leaks import LeakReport
    from foxhunt.dataset.prepared import Prepared
    from foxhunt.features.cache_file import FeatureCache

T = TypeVar("T")

LEAK_GUARD = "leak guard"
"""The guard's step name in the progress display (every command shows the same one)."""


class Stopped(StrEnum):
    """What a leak stops: the end of the guard's error line (``... : nothing is trained on a leak``)."""

    TRAINING = "nothing is trained on a leak"
    TUNING = "nothing is tuned on a leak"
    ALPHA = "no alpha result is reported on a leak"


def leak_guard(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    where: str,
    stops: Stopped,
    progress: Reporter,
    say: Callable[[str], object],
    *,
    load_progress: Reporter = SILENT,
) -> LeakReport:
    """Run the leak guard on the DBN ``files`` as a step of ``progress``, then ``say`` its verdict.

    A leak raises :class:`~foxhunt.dataset.leaks.LeakFoundError` (exit 3) naming ``where`` it
    ran and what it ``stops``; nothing after the guard runs. ``load_progress`` shows the reading of
    the files (silent by default: a features stage that reads them again shows its own bars).
    """
    return leak_guard_prepared(files, cfg, where, stops, progress, say, load_progress=load_progress)[0]


def leak_guard_prepared(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    where: str,
    stops: Stopped,
    progress: Reporter,
    say: Callable[[str], object],
    *,
    load_progress: Reporter = SILENT,
) -> tuple[LeakReport, Prepared]:
    """:func:`leak_guard`, and what it read and computed on the unperturbed files: passed to
    :func:`foxhunt.dataset.build.get_or_build` (``prepared``), a cache built next starts from it
    instead of reading the files and computing the rows and features a second time."""
    return leak_guard_while(files, cfg, where, stops, progress, say, _kept, load_progress=load_progress)


def _kept(prepared: Prepared) -> Prepared:
    return prepared


def leak_guard_while(
    files: Sequence[str | Path],
    cfg: FoxhuntConfig,
    where: str,
    stops: Stopped,
    progress: Reporter,
    say: Callable[[str], object],
    meanwhile: Callable[[Prepared], T],
    *,
    builds: Path | None = None,
    load_progress: Reporter = SILENT,
) -> tuple[LeakReport, T]:
    """:func:`leak_guard`, with ``meanwhile(prepared)`` run while the guard's cuts run in other
    processes (:func:`foxhunt.dataset.leaks.guard_while`): its result when the data is clean.
    ``builds``: a folder ``meanwhile`` may create (a feature cache), removed when the guard refuses
    the data or either fails, unless it was there before: nothing built from refused data stays."""
    import shutil

    from foxhunt.dataset.leaks import guard_while

    removed_on_failure = builds if builds is not None and not builds.exists() else None
    try:
        with progress.task(LEAK_GUARD):
            report, value = guard_while(files, cfg, where, stops.value, meanwhile, load_progress)
    except BaseException:
        if removed_on_failure is not None:
            shutil.rmtree(removed_on_failure, ignore_errors=True)
        raise
    say(report.verdict)
    return report, value


def alpha_horizons(cfg: FoxhuntConfig) -> tuple[int, ...]:
    """The horizons (rows) the alpha check scores: ``alpha.horizons``, else the labels' own."""
    return tuple(cfg.alpha.horizons or cfg.labels.horizons(cfg.data.row_unit))


def alpha_check(
    cache: FeatureCache, cfg: FoxhuntConfig, leaks: LeakReport, progress: Reporter
) -> AlphaResult:
    """The alpha check of ``cache`` over :func:`alpha_horizons`, carrying the guard's report
    (``alpha.json``'s ``leak_guard``: the result says which guard it passed)."""
    from foxhunt.alpha.check import run_alpha

    result = run_alpha(cache, cfg.alpha, cfg.folds, alpha_horizons(cfg), cfg.run.seed, progress=progress)
    result.leak_guard = leaks.to_dict()
    return result
