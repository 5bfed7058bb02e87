"""databento, imported for foxhunt: ``from foxhunt.data.bento import db``.

databento's ``__init__`` runs ``warnings.simplefilter("always", DeprecationWarning)``: from then on
every DeprecationWarning of every library in the process is printed, each time. A foxhunt user saw
torch's own (14 lines of ``torch.jit.script_method`` at Inductor's first import, from
``torch.utils.mkldnn``) and Python's notice at every forked helper (the leak guard's cuts, the kernel
warm-up): nothing they can act on, between the job's lines. Importing databento through here takes
that one process-wide filter back (the interpreter's defaults apply again, as before the import) and
keeps databento's own deprecations visible (once per place), the ones a user of its API can act on.
Every foxhunt module that needs databento imports it from here.
"""

from __future__ import annotations

import warnings

import databento as db

_ALWAYS = ("always", None, DeprecationWarning, None, 0)  # the filter entry databento's __init__ adds
if _ALWAYS in warnings.filters:
    warnings.filters.remove(_ALWAYS)
# (filterwarnings also tells the warnings machinery that its filters changed.)
warnings.filterwarnings("default", category=DeprecationWarning, module=r"databento(\.|$)")

__all__ = ["db"]
