"""Feature stage: causal feature families, the state layout, the feature stack, and the format of the
feature cache's file (:mod:`.cache_file`; the dataset stage, :mod:`foxhunt.dataset`, builds it).

Every family module (``market``, ``ofi``, ``tlob``, ``mtf``, ``snapshot``) exposes the same four
names, which :mod:`foxhunt.features.stack` and :mod:`foxhunt.features.layout` read:

* ``SLOTS``: the column names, in order (the family's width is ``len(SLOTS)``);
* ``NEEDS_BOOK``: whether the family is 0 (and masked) without book data (``data_source=ohlcv``);
* ``CONFIG``: its frozen config class ``<Family>Config`` (windows, lags), part of ``FeaturesConfig``;
* ``compute(inp: RowInput, params: <Family>Config) -> np.ndarray``: float32 ``[n, len(SLOTS)]``, causal
  (row t uses data with timestamps <= ``inp.ts[t]`` only), finite, 0 meaning "no signal".
"""
