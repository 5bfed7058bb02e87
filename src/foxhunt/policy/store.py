"""The checkpoints of one run (docs/design.md §7), laid out per fold as
``run_dir/checkpoints/fold{k}/{best,last,ring/epoch{e:04d}}``, in one concept per class:

* :class:`CheckpointPaths`: where each file lies, and what the folders hold (reads only the disk);
* :class:`EpochRing`: the ring of recent epochs a rewind or a resume reads;
* :class:`BestCheckpoint`: the fold's best epoch by the selection metric;
* :class:`CheckpointStore`: the three over one :class:`~foxhunt.policy.writer.CheckpointWriter`,
  with the epoch's save and the resume point.

:meth:`CheckpointStore.save_epoch` writes an epoch's ring entry before ``last`` (a byte copy of it),
so a kill at any point of the save leaves the ring's newest entry at the resume point's epoch. With
``Writes.BACKGROUND`` (what training uses) a save copies the state to host memory and returns; one
writer thread hashes and writes it while the next epoch runs (at production sizes a checkpoint holds
a 1-2 GB replay buffer: hashing, writing and fsyncing it took about 5 s an epoch, more than the
epoch's own 2.9 s on an H200). The copy goes into host buffers the writer reuses from save to save,
pinned and filled asynchronously on the current CUDA stream for a GPU state
(:mod:`foxhunt.policy.snapshot`). Saves keep their order, and every method that reads the store
first waits for the pending one.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from foxhunt.policy.checkpoint import (
    CheckpointContents,
    CheckpointError,
    checkpoint_files,
    copy_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from foxhunt.policy.writer import CheckpointWriter, Writes


class BestEligibility(Protocol):
    """The anomaly guard's judgement of an epoch (:class:`foxhunt.train.guard.GuardResult` is one):
    only an epoch that ``may_be_best`` can be marked best."""

    @property
    def may_be_best(self) -> bool: ...


@dataclass(frozen=True)
class ResumePoint:
    """The last epoch a run saved: ``path`` is its checkpoint's safetensors file."""

    fold: int
    epoch: int
    path: Path


_RING_NAME = re.compile(r"^epoch(\d+)\.safetensors$")
_FOLD_NAME = re.compile(r"^fold(\d+)$")


def _save(path: Path, fold: int, epoch: int, contents: CheckpointContents, **extra: Any) -> Path:
    """Save ``contents`` at ``path`` with the fold and epoch (and ``extra``) in its meta."""
    return save_checkpoint(
        path,
        policy=contents.policy,
        branches=contents.branches,
        training=contents.training,
        meta={**contents.meta, "fold": fold, "epoch": epoch, **extra},
        layout=contents.layout,
    )


class CheckpointPaths:
    """Where a run's checkpoints lie: ``run_dir/checkpoints/fold{k}/{best,last,ring/epoch{e:04d}}``
    (each the safetensors file of the pair). It reads the folders as they are on disk now, without
    waiting for pending saves."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / "checkpoints"

    def fold_dir(self, fold: int) -> Path:
        return self.root / f"fold{fold}"

    def last(self, fold: int) -> Path:
        return checkpoint_files(self.fold_dir(fold) / "last")[0]

    def best(self, fold: int) -> Path:
        return checkpoint_files(self.fold_dir(fold) / "best")[0]

    def ring(self, fold: int, epoch: int) -> Path:
        return checkpoint_files(self.fold_dir(fold) / "ring" / f"epoch{epoch:04d}")[0]

    def ring_files(self, fold: int) -> list[Path]:
        """The ring's safetensors files on disk, oldest epoch first."""
        ring_dir = self.fold_dir(fold) / "ring"
        if not ring_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in ring_dir.iterdir() if (m := _RING_NAME.match(p.name))]
        return [p for _, p in sorted(found)]

    def folds(self) -> list[int]:
        """The folds with a folder on disk, in order."""
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _FOLD_NAME.match(p.name)))


class EpochRing:
    """The newest ``keep`` epochs of each fold (for rewinds and resumes), oldest deleted as new ones
    are complete."""

    def __init__(self, paths: CheckpointPaths, writer: CheckpointWriter, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"ring must keep at least one checkpoint, got {keep}")
        self.paths = paths
        self.writer = writer
        self.keep = keep

    def save(self, fold: int, epoch: int, contents: CheckpointContents) -> Path:
        """Save epoch ``epoch`` into the ring and delete all but the newest ``keep`` entries."""

        def write(c: CheckpointContents) -> None:
            _save(self.paths.ring(fold, epoch), fold, epoch, c)
            self.trim(fold)

        self.writer.submit(write, contents)
        return self.paths.ring(fold, epoch)

    def trim(self, fold: int) -> None:
        """Delete all but the newest ``keep`` entries (on the caller's thread: no wait)."""
        for old in self.paths.ring_files(fold)[: -self.keep]:
            for file in checkpoint_files(old):
                file.unlink(missing_ok=True)

    def files(self, fold: int) -> list[Path]:
        """The ring's safetensors files once the pending saves are written, oldest epoch first."""
        self.writer.wait()
        return self.paths.ring_files(fold)

    def latest(self, fold: int) -> Path | None:
        ring = self.files(fold)
        return ring[-1] if ring else None


class BestCheckpoint:
    """Each fold's best epoch by the selection metric (``higher_is_better`` its direction)."""

    def __init__(
        self, paths: CheckpointPaths, writer: CheckpointWriter, *, higher_is_better: bool = True
    ) -> None:
        self.paths = paths
        self.writer = writer
        self.higher_is_better = higher_is_better
        # Each fold's best metric as this store saved or first read it: save compares with it
        # every epoch, and reading the file would wait for the pending saves (a 1-2 GB resumable
        # checkpoint at GPU sizes) on every epoch. Only this store writes best, so it cannot go stale.
        self._metrics: dict[int, float | None] = {}

    def save(
        self, fold: int, epoch: int, contents: CheckpointContents, *, metric: float, verdict: BestEligibility
    ) -> Path | None:
        """Save as the fold's best when the guard's ``verdict`` allows it, ``metric`` is finite and it
        is strictly better than the stored best; return the path, or None when not saved (a flagged
        epoch never replaces the best, however good its metric)."""
        if not verdict.may_be_best or not math.isfinite(metric):
            return None
        best = self.metric(fold)
        if best is not None and not (metric > best if self.higher_is_better else metric < best):
            return None
        self.writer.submit(
            lambda c: _save(self.paths.best(fold), fold, epoch, c, best_metric=float(metric)), contents
        )
        self._metrics[fold] = float(metric)
        return self.paths.best(fold)

    def metric(self, fold: int) -> float | None:
        """The fold's best metric (None before any best), without waiting for pending saves once known."""
        if fold not in self._metrics:
            self.writer.wait()
            path = self.paths.best(fold)
            known = float(read_checkpoint_meta(path)["best_metric"]) if path.is_file() else None
            self._metrics[fold] = known
        return self._metrics[fold]

    def forget_from(self, fold: int, epoch: int) -> None:
        """Delete the fold's best checkpoint when it was saved at ``epoch`` or later: a resume redoes
        the epochs after its resume point (up to ``train.checkpoint_every``), and a best saved by one
        of them before the kill would otherwise outrank its own redo, which then is never recorded as
        the best epoch. A best from a later epoch was better than every earlier one, so nothing the
        redo needs is lost."""
        self.writer.wait()
        path = self.paths.best(fold)
        if path.is_file() and int(read_checkpoint_meta(path)["epoch"]) >= epoch:
            for file in checkpoint_files(path):
                file.unlink(missing_ok=True)
        self._metrics.pop(fold, None)


class CheckpointStore:
    """Checkpoints of one run: its :attr:`paths`, the :attr:`ring` of recent epochs (``ring`` of
    them kept, for rewinds), the :attr:`best` epoch (``higher_is_better`` the direction of the metric
    it compares) and ``last``, all written through one :attr:`writer` (``writes``: when)."""

    def __init__(
        self, run_dir: str | Path, ring: int, *, higher_is_better: bool = True, writes: Writes = Writes.NOW
    ) -> None:
        self.paths = CheckpointPaths(run_dir)
        self.writer = CheckpointWriter(writes)
        self.ring = EpochRing(self.paths, self.writer, ring)
        self.best = BestCheckpoint(self.paths, self.writer, higher_is_better=higher_is_better)

    def wait(self, keep: int = 0) -> None:
        """Block until all but the newest ``keep`` pending saves are on disk (see
        :meth:`CheckpointWriter.wait`)."""
        self.writer.wait(keep)

    def close(self) -> None:
        """Wait for the pending save, stop the writer thread and free its host storages."""
        self.writer.close()

    def save_last(self, fold: int, epoch: int, contents: CheckpointContents) -> Path:
        self.writer.submit(lambda c: _save(self.paths.last(fold), fold, epoch, c), contents)
        return self.paths.last(fold)

    def save_epoch(self, fold: int, epoch: int, contents: CheckpointContents) -> Path:
        """Save the end of epoch ``epoch`` as the ring entry, then as ``last``; return ``last``.

        The ring first: a kill while saving ``last`` leaves the ring's newest entry at this epoch,
        which :meth:`resume_point` then picks, and a kill while saving the ring leaves both at the
        previous epoch, which a resume redoes. Either way the ring holds the resume point's epoch,
        as an uninterrupted run's does (a rewind reads it); old ring entries go only once both new
        files are complete.
        """
        self.writer.submit(self._write_epoch, contents, fold, epoch)
        return self.paths.last(fold)

    def _write_epoch(self, contents: CheckpointContents, fold: int, epoch: int) -> None:
        ring = _save(self.paths.ring(fold, epoch), fold, epoch, contents)
        copy_checkpoint(ring, self.paths.last(fold))  # the same bytes: serialised and hashed once
        self.ring.trim(fold)

    def folds(self) -> list[int]:
        """The folds the run saved, once the pending saves are written."""
        self.writer.wait()
        return self.paths.folds()

    def resume_point(self) -> ResumePoint | None:
        """The latest (fold, epoch) saved as ``last`` or in a ring; an unreadable ``last`` falls
        back to the ring. None when the run saved nothing."""
        best: ResumePoint | None = None
        for fold in self.folds():
            for path in [*self.ring.files(fold), self.paths.last(fold)]:
                if not path.is_file():
                    continue
                try:
                    meta = read_checkpoint_meta(path)
                    point = ResumePoint(int(meta["fold"]), int(meta["epoch"]), path)
                except (CheckpointError, KeyError, TypeError, ValueError):
                    continue  # unreadable, or not a training checkpoint (no fold/epoch): not a resume point
                if best is None or (point.fold, point.epoch) >= (best.fold, best.epoch):
                    best = point
        return best
