"""A typer app whose help names the value an option takes the way a person types it: typer writes
Python types (``<list[Path]>``, ``<bool>`` for a flag); these classes write ``PATH...``, nothing."""

from __future__ import annotations

from typing import Any

import typer

_TYPE_WORDS = {"path": "PATH", "str": "TEXT", "int": "N", "float": "NUMBER"}


def _readable_type(label: str) -> str:
    """``<list[Path]>`` -> ``PATH...``, ``<int>`` -> ``N``, ``<bar|snapshot>`` -> ``bar|snapshot``."""
    inner = label.strip("<>")
    many = inner.startswith("list[")
    inner = inner.removeprefix("list[").removesuffix("]")
    word = _TYPE_WORDS.get(inner.lower(), inner if "|" in inner else inner.upper())
    return word + ("..." if many else "")


def _readable(params: list[Any], ctx: Any) -> list[Any]:
    from typer.core import TyperArgument, TyperOption

    for p in params:
        if isinstance(p, TyperOption) and p.metavar is None:
            # A flag takes no value: nothing beside it; another option its readable type.
            # display_type is newer typer's (0.2x); older releases only have the click type's name.
            shown = p.display_type(ctx) if hasattr(p, "display_type") else getattr(p.type, "name", "")
            p.metavar = "" if p.is_flag else _readable_type(shown)
        elif isinstance(p, TyperArgument) and p.metavar is not None:
            # typer shows an argument's Python type beside its metavar: the metavar says it all.
            p.display_type_rich = lambda ctx: None
    return params


class _Command(typer.core.TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)


class _Group(typer.core.TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx), ctx)


class App(typer.Typer):
    """A typer app whose groups and commands show readable value names in their help."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=_Group, **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", _Command)
        return super().command(*args, **kwargs)
