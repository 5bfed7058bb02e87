"""Backtester: batched deterministic evaluation of a policy and the metrics of SPEC §9."""
