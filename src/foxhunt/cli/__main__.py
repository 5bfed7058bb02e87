"""``python -m foxhunt.cli``: the ``foxhunt`` command."""

import sys

from foxhunt.cli import app

sys.exit(app())
