"""The resolved config as TOML text that ``--config FILE`` reads back to the same config.

``foxhunt config show --toml > my.toml`` then ``--config my.toml`` gives the same config hash. The
writer is small because the config's JSON form holds only tables, strings, numbers, booleans,
lists and nulls. TOML has no null: a key whose value is None is written as a comment and left out,
so it takes its default on reading, and :func:`config_toml` checks that this default is None
(otherwise the text would not read back to the same config, and it refuses).
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else _string(k)


def _string(s: str) -> str:
    # A TOML basic string: the named escapes, \uXXXX for the other control characters (and DEL).
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # shortest text that reads back to the same double
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x, where) for x in v) + "]"
    if isinstance(v, dict):
        items = (f"{_key(k)} = {_value(x, f'{where}.{k}')}" for k, x in v.items() if x is not None)
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"{where}: {type(v).__name__} value {v!r} has no TOML form")


def _table(tree: dict[str, Any], path: list[str], lines: list[str]) -> None:
    # Keys of a table come before its sub-tables (a key after a [header] belongs to that header).
    for k, v in tree.items():
        if isinstance(v, dict):
            continue
        if v is None:
            lines.append(f"# {_key(k)}: not set (None)")
        else:
            lines.append(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}")
    for k, v in tree.items():
        if isinstance(v, dict):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in [*path, k]) + "]")
            _table(v, [*path, k], lines)


def _none_defaults_only(model: BaseModel, where: str) -> None:
    """Refuse a None value whose field's default is not None: leaving it out would change it."""
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if value is None and field.get_default(call_default_factory=True) is not None:
            raise ValueError(f"{where}{name} is None but defaults to {field.default!r}: TOML cannot say so")
        if isinstance(value, BaseModel):
            _none_defaults_only(value, f"{where}{name}.")


def config_toml(cfg: BaseModel, header: str = "") -> str:
    """``cfg`` (any config model, normally the root) as TOML; ``header`` becomes comments."""
    _none_defaults_only(cfg, "")
    lines = [f"# {h}" for h in header.splitlines()]
    _table(cfg.model_dump(mode="json"), [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"
