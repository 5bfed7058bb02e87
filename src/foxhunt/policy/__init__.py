"""Trained policies: the checkpoint format (:mod:`foxhunt.policy.checkpoint`), the snapshots it
is written from (:mod:`foxhunt.policy.snapshot`), a run's checkpoints (:mod:`foxhunt.policy.store`,
written through :mod:`foxhunt.policy.writer`) and a checkpoint (or a committee of them) as a
greedy policy (:mod:`foxhunt.policy.trained`).

It sits between the agent and the backtest (docs/design.md): the backtest, the server and the API
load a trained policy without importing the training loop that wrote it."""
