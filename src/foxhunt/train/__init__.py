"""Training: the walk-forward run loop, checkpoints (:mod:`foxhunt.train.checkpoint`) and
diagnostics (docs/design.md §7)."""
