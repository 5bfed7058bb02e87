"""Names of the statistics the agent's learner reports each update (read by the run's diagnostics).

A statistic is named ``<group>/<name>``; the group is its TensorBoard section
(:class:`foxhunt.train.diagnostics.BoardSection`). The Q statistics are per action branch, so their names
are built here, where the learner that reports them and the agent that reads them back both find
them.
"""

from __future__ import annotations

Q_GROUP = "q"
"""The group of the per-branch Q statistics."""


def q_key(branch: str, stat: str) -> str:
    """``q/<branch>/<stat>``, ``stat`` one of ``mean``, ``spread`` (E[Q] over a batch, in dollars)."""
    return f"{Q_GROUP}/{branch}/{stat}"
