"""``foxhunt serve``: a trained agent deciding on a stream of book data, decision for decision the
same as ``foxhunt backtest --checkpoint`` on the same records (docs/serve.md).

One module per concept: :mod:`.config` (the ``[serve]`` section), :mod:`.source` (replay and live
record sources behind one interface), :mod:`.state` (the causal rows, features and market built
with the batch kernels), :mod:`.monitor` (fail-safe checks on the stream), :mod:`.ledger` (paper
positions, fills and PnL in SQLite with write-ahead logging), :mod:`.service` (the served checkpoint,
whose parts are :mod:`.loop`, :mod:`.waits`, :mod:`.intake`, :mod:`.ahead`, :mod:`.close` and
:mod:`.publish`) and :mod:`.http` (a status endpoint on 127.0.0.1, with token-guarded flatten and stop).
"""
