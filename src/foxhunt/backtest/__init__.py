"""Backtester: batched deterministic evaluation of a policy and its metrics (docs/design.md §8)."""
