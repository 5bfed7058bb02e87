"""foxhunt.data.bento: importing databento through foxhunt leaves the interpreter's warning defaults.

databento's ``__init__`` switches every DeprecationWarning of every library on for the whole
process; torch's internal ones (at Inductor's first import) and Python's fork notice then reached a
foxhunt user's terminal. Each case runs in a fresh interpreter: the filters are process-wide."""

from __future__ import annotations

import subprocess
import sys

WARN = """
import warnings
{imports}
warnings.warn_explicit("another library's deprecation", DeprecationWarning, "lib.py", 1, module="somelib")
warnings.warn_explicit("databento's own deprecation", DeprecationWarning, "db.py", 1, module="databento.live")
"""


def _stderr(imports: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", WARN.format(imports=imports)], capture_output=True, text=True, check=True
    )
    return done.stderr


def test_databento_alone_turns_every_deprecation_on() -> None:
    """The behaviour foxhunt undoes (if databento stops it, foxhunt.data.bento is a no-op)."""
    err = _stderr("import databento")
    assert "databento's own deprecation" in err
    assert "another library's deprecation" in err


def test_foxhunt_keeps_other_libraries_deprecations_quiet_and_databentos_visible() -> None:
    for imports in ("import foxhunt.data.dbn_read", "import databento\nimport foxhunt.data.bento"):
        err = _stderr(imports)
        assert "another library's deprecation" not in err, imports
        assert "databento's own deprecation" in err, imports
