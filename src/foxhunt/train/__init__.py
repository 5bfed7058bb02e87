"""Training: the walk-forward run loop, checkpoints (:mod:`foxhunt.train.checkpoint`) and
diagnostics (SPEC §8)."""
