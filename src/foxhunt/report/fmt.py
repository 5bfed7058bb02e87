"""Number formats and small HTML pieces shared by the report's sections.

Every piece of text from the summary goes through :func:`esc`; a missing or non-finite number prints
as "n/a". The sections' templates lay these out (``templates/_macros.html.j2``: a table in its own
horizontally scrolling box, so a wide table scrolls inside the page instead of widening it).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from foxhunt.domain.baselines import ORDER, Baseline

NA = '<span class="na">n/a</span>'


def esc(x: Any) -> str:
    return html.escape(str(x))


def num(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool), else ``None``."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def money(x: Any) -> str:
    """``$1,234.50`` / ``-$56.79``; "n/a" for a missing or non-finite value."""
    v = num(x)
    if v is None:
        return NA
    return f"{'-' if v < 0 else ''}${abs(v):,.2f}"


def fixed(x: Any, digits: int = 2) -> str:
    v = num(x)
    return NA if v is None else f"{v:,.{digits}f}"


def pct(x: Any, digits: int = 1) -> str:
    v = num(x)
    return NA if v is None else f"{100.0 * v:.{digits}f}%"


def rate(x: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage; a negative value is the metrics' "undefined" sentinel
    (a win rate with no trades is -1, not 0%), shown as n/a."""
    v = num(x)
    return NA if v is None or v < 0 else f"{100.0 * v:.{digits}f}%"


def count(x: Any) -> str:
    v = num(x)
    if v is None:
        return NA
    return f"{int(v):,}" if v == int(v) else f"{v:,.1f}"


def duration(x: Any) -> str:
    v = num(x)
    if v is None:
        return NA
    if v < 60:
        return f"{v:.1f} s"
    h, rest = divmod(int(round(v)), 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min {s:02d} s" if h else f"{m} min {s:02d} s"


def text(x: Any) -> str:
    return NA if x is None or x == "" else esc(x)


def note(message: str) -> str:
    return f'<p class="na">{esc(message)}</p>'


def td(content: str, cls: str = "num") -> str:
    return f'<td class="{cls}">{content}</td>' if cls else f"<td>{content}</td>"


def mapping(summary: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    part = summary.get(key)
    return part if isinstance(part, Mapping) and part else None


def mean(values: Sequence[Any]) -> float | None:
    vs = [v for v in (num(x) for x in values) if v is not None]
    return sum(vs) / len(vs) if vs else None


def fold_id(fold: Mapping[str, Any], i: int) -> int:
    v = num(fold.get("fold"))
    return int(v) if v is not None else i


def implausible_reasons(metrics: Mapping[str, Any]) -> list[str]:
    """Why a result was flagged implausible: ``implausible`` as a list of reasons, or ``True`` with
    optional ``implausible_reasons``; empty when not flagged."""
    flag = metrics.get("implausible")
    if isinstance(flag, list | tuple):
        return [str(r) for r in flag]
    if flag is True:
        extra = metrics.get("implausible_reasons")
        return [str(r) for r in extra] if isinstance(extra, list | tuple) and extra else ["flagged"]
    return []


def policy_names(folds: Sequence[Mapping[str, Any]]) -> list[str]:
    """``["agent", "flat", "long", "buy_hold", <other baselines in any fold>...]``: the baselines every
    run has (:data:`foxhunt.domain.baselines.ORDER`) first, then any other (a reference rule) in the
    order the summary gives it. A summary from before buy-and-hold shows none (not a column of n/a)."""
    given = {str(n) for f in folds if isinstance(f.get("baselines"), Mapping) for n in f["baselines"]}
    names = [b.value for b in ORDER if b is not Baseline.BUY_HOLD or b.value in given]
    for fold in folds:
        base = fold.get("baselines")
        if isinstance(base, Mapping):
            names += [str(n) for n in base if str(n) not in names]
    return ["agent", *names]


def policies(fold: Mapping[str, Any], names: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """``{"agent": fold, "flat": ..., ...}`` for ``names``, an absent baseline as an empty dict."""
    base = fold.get("baselines") if isinstance(fold.get("baselines"), Mapping) else {}
    out: dict[str, Mapping[str, Any]] = {"agent": fold}
    for name in names:
        if name != "agent":
            b = base.get(name)
            out[name] = b if isinstance(b, Mapping) else {}
    return out
