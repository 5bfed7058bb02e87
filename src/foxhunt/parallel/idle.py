"""How many of this process's cores are idle now: where forking helpers pays (leak-guard cuts, kernel
warm-up) and where it only adds the fork's own cost to a machine that is busy already."""

from __future__ import annotations

import os

from foxhunt.parallel.resources import usable_cores


def idle_cores() -> float:
    """Usable cores less the 1-minute load average (this process, when running, counts in it);
    all usable cores where the platform has no load average."""
    try:
        return usable_cores() - os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average (Windows has no os.getloadavg)
        return float(usable_cores())
