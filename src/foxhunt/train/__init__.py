"""Training: the walk-forward run loop, the selection of a fold's checkpoint and diagnostics
(docs/design.md §7); the checkpoint format it writes is :mod:`foxhunt.policy.checkpoint`."""
