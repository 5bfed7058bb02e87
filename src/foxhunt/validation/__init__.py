"""Validation stage: labels, purged walk-forward folds and per-fold robust normalisation.

* :mod:`.labels`: direction labels sign(close[t+K] - close[t]) and triple-barrier outcomes
  (profit / stop / timeout), valid only inside one session/contract segment.
* :mod:`.folds`: purged walk-forward folds (expanding or rolling) with an embargo of at least the
  longest label horizon.
* :mod:`.normalise`: the robust scaler fitted per fold on training rows only, and :func:`apply`,
  the one normalisation function every loader path uses (docs/design.md §10, invariant 2).
"""
