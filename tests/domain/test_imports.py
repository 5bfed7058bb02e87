"""The domain is what every stage shares: it imports no stage, so any stage may import it."""

from __future__ import annotations

import subprocess
import sys

ALLOWED = ("foxhunt.domain", "foxhunt.config.base", "foxhunt.errors")


def test_the_domain_imports_no_stage() -> None:
    code = (
        "import sys\n"
        "import foxhunt.domain.actions, foxhunt.domain.barrier\n"
        "import foxhunt.domain.exits, foxhunt.domain.instrument, foxhunt.domain.sharpe\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('foxhunt.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = out.split()
    assert "foxhunt.domain.instrument" in loaded
    assert [m for m in loaded if not m.startswith(ALLOWED) and m != "foxhunt.config"] == []
