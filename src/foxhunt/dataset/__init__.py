"""Dataset stage: the feature cache that training reads, built from market files, and the leak guard
that rebuilds what the cache stores and demands that a row sees nothing after it.

* :mod:`.cache`: the cache's key, values and metadata (rows, features and labels of a market);
  :mod:`.build`: :func:`~foxhunt.dataset.build.get_or_build`, the one way to a cache;
  :mod:`.distributed`: the same file built one session group per task; :mod:`.remember`: the
  settings of an earlier build on the same files. The file's format and how every stage opens it:
  :mod:`foxhunt.features.cache_file`.
* :mod:`.warmup`: the feature and label kernels compiled ahead in forked processes.
* :mod:`.leaks`: the leak guard (docs/design.md §4), with :mod:`.decision` (the path from a row to
  the learner's input), :mod:`.reach` (how far the labels read) and :mod:`.prepared` (what the guard
  read and computed, handed to the cache build).
"""
