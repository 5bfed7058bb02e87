"""User feature families (plug-ins): found, checked, parametrised and fingerprinted.

A researcher adds a family without editing foxhunt by naming it in ``features.plugins``; each entry
is, in this order of lookup,

* a path to a ``.py`` file (``examples/plugins/trade_arrival.py``),
* the name of an entry point in the group :data:`ENTRY_POINT_GROUP` (``foxhunt.features``) of an
  installed package, or
* a module path (``mypkg.myfamily``) importable from ``sys.path``.

What is loaded (the module, or the object the entry point names) is a family with the contract of
:mod:`foxhunt.features` plus a name and its long/short mirror parity (docs/feature-plugins.md):

* ``NAME``: the group name, a Python identifier that no built-in family or other plug-in uses; its
  columns are ``NAME.slot``;
* ``SLOTS``: the column names, in order (the width is ``len(SLOTS)``);
* ``NEEDS_BOOK``: whether its values are 0 (and masked) on rows without book data;
* ``MIRROR_ODD`` / ``MIRROR_SWAPS``: the slots the mirror negates and the pairs it exchanges (every
  other slot is even), as the built-in families declare them (:mod:`foxhunt.features.registry`);
* ``compute(inp: RowInput, params) -> [n, len(SLOTS)]``: causal, finite, 0 = no signal;
* optionally ``CONFIG``: its settings class, a pydantic model named ``<Family>Config`` (settings from
  ``features.plugin_params.NAME``), and ``ROW_UNITS`` (the row units whose stacks it joins; default
  every one).

Plug-in columns are then computed by the same :func:`foxhunt.features.stack.compute_stack` as the
built-in ones, so they join the stack layout, the cache (its key holds :func:`Plugin.fingerprint`,
a hash of the plug-in's code, and the config holds its settings), the feature statistics and the
leak guard. A plug-in that breaks the contract is refused when it is loaded (:class:`PluginError`,
exit 2), naming the entry of ``features.plugins`` and the problem.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pydantic

from foxhunt.data.schemas import RowUnit
from foxhunt.errors import ConfigError
from foxhunt.features.fingerprint import module_fingerprint
from foxhunt.features.layout import STACK_FAMILIES, Mirror, build_layout, build_mirror
from foxhunt.features.registry import FAMILIES, Family

if TYPE_CHECKING:
    from foxhunt.features.config import FeaturesConfig

ENTRY_POINT_GROUP = "foxhunt.features"
_FILE_MODULE_PREFIX = "foxhunt_plugin_"  # sys.modules name of a plug-in loaded from a .py file


class PluginError(ConfigError):
    """A configured feature plug-in cannot be found or breaks the family contract."""


@dataclass(frozen=True, eq=False)
class Plugin:
    """One loaded, checked plug-in family with its validated settings."""

    spec: str  # the entry of features.plugins it came from
    family: Family  # the module or object with the family contract
    module: ModuleType  # where its code lives (hashed into the cache key)
    params: object  # its CONFIG(**features.plugin_params[NAME]), or None without CONFIG
    row_units: tuple[RowUnit, ...]

    @property
    def name(self) -> str:
        return str(self.family.NAME)  # type: ignore[attr-defined]

    def mirror(self) -> Mirror:
        """The long/short mirror of the plug-in's own columns, from its declaration."""
        return _declared_mirror(self.family)

    def fingerprint(self) -> str:
        """Hash of the plug-in's current code: every function, class and constant of its module, and
        those it imports from its own top-level package (:func:`module_fingerprint`)."""
        own = (self.module.__name__.split(".")[0],)
        return module_fingerprint(self.module, own=own)


def _from_file(spec: str) -> ModuleType:
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise PluginError("features.plugins", f"plug-in file {spec!r} does not exist", "check the path")
    # One module per file and content (their hash in the name): two plug-ins of the same file name
    # coexist, and an edited file is loaded again instead of served stale from sys.modules.
    key = hashlib.sha256(str(path).encode() + b"\0" + path.read_bytes()).hexdigest()[:12]
    name = f"{_FILE_MODULE_PREFIX}{path.stem}_{key}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise PluginError("features.plugins", f"{spec!r} is not a loadable Python file", "pass a .py file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(
            "features.plugins", f"plug-in file {spec!r} failed to import ({exc!r})", "fix the plug-in"
        ) from exc
    return module


def _locate(spec: str) -> tuple[Any, ModuleType]:
    """The family object named by ``spec`` and the module holding its code."""
    if spec.endswith(".py"):
        module = _from_file(spec)
        return module, module
    points = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    if points:
        try:
            obj = points[0].load()
        except Exception as exc:
            raise PluginError(
                "features.plugins",
                f"entry point {spec!r} of group {ENTRY_POINT_GROUP} failed to load ({exc!r})",
                "fix or reinstall the package that declares it",
            ) from exc
        module = obj if isinstance(obj, ModuleType) else inspect.getmodule(obj)
        if module is None:
            raise PluginError(
                "features.plugins",
                f"entry point {spec!r}: cannot find the module of its code",
                "point it at a module or at an object defined in one",
            )
        return obj, module
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        raise PluginError(
            "features.plugins",
            f"no module {spec!r} ({exc.msg}) and no {ENTRY_POINT_GROUP} entry point of that name",
            "install the package, add its folder to PYTHONPATH, or give the path of the .py file",
        ) from exc
    except Exception as exc:
        raise PluginError(
            "features.plugins", f"plug-in module {spec!r} failed to import ({exc!r})", "fix the plug-in"
        ) from exc
    return module, module


def _declared_mirror(family: Any) -> Mirror:
    name = family.NAME
    layout = build_layout(name, [(name, tuple(family.SLOTS))], 1)
    odd = [f"{name}.{s}" for s in family.MIRROR_ODD]
    return build_mirror(layout, odd, [(f"{name}.{a}", f"{name}.{b}") for a, b in family.MIRROR_SWAPS])


def _contract_problem(family: Any) -> str | None:
    """What of the family contract ``family`` breaks (None: nothing)."""
    name = getattr(family, "NAME", None)
    if not isinstance(name, str) or not name.isidentifier():
        return f"NAME must be a Python identifier (its columns are NAME.slot), got {name!r}"
    slots = getattr(family, "SLOTS", None)
    if not isinstance(slots, tuple) or not slots or not all(isinstance(s, str) and s for s in slots):
        return f"SLOTS must be a non-empty tuple of column names, got {slots!r}"
    if len(set(slots)) != len(slots) or any("." in s for s in slots):
        return f"SLOTS must be distinct names without dots, got {slots!r}"
    if not isinstance(getattr(family, "NEEDS_BOOK", None), bool):
        return "NEEDS_BOOK must be True or False"
    if not callable(getattr(family, "compute", None)):
        return "compute(inp, params) must be a function"
    if hasattr(family, "Params") and not hasattr(family, "CONFIG"):
        # The contract's settings attribute was renamed (issue 55): a plug-in written before then
        # would otherwise be loaded without its settings.
        return "its settings class is named by CONFIG (CONFIG = <Family>Config), not Params: rename it"
    odd, swaps = getattr(family, "MIRROR_ODD", None), getattr(family, "MIRROR_SWAPS", None)
    if not isinstance(odd, frozenset | set | tuple) or not isinstance(swaps, tuple):
        return (
            "declare the long/short mirror parity: MIRROR_ODD (slots the mirror negates, e.g. frozenset()) "
            "and MIRROR_SWAPS (pairs it exchanges, e.g. ())"
        )
    try:
        _declared_mirror(family)
    except (ValueError, TypeError, KeyError) as exc:
        return f"mirror declaration: {exc}"
    units = getattr(family, "ROW_UNITS", tuple(RowUnit))
    try:
        tuple(RowUnit(u) for u in units)
    except (ValueError, TypeError):
        return f"ROW_UNITS must list row units ({', '.join(u.value for u in RowUnit)}), got {units!r}"
    return None


def _params(family: Any, settings: Mapping[str, Any] | None) -> object:
    name = family.NAME
    params_cls = getattr(family, "CONFIG", None)
    if params_cls is None:
        if settings:
            raise PluginError(
                f"features.plugin_params.{name}",
                f"plug-in {name!r} takes no settings (it has no CONFIG), got {sorted(settings)}",
                "remove them",
            )
        return None
    try:
        return params_cls(**dict(settings or {}))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise PluginError(
            f"features.plugin_params.{name}.{key}" if key else f"features.plugin_params.{name}",
            first["msg"],
            f"see the fields of {name}'s CONFIG class",
        ) from None


def load_plugins(cfg: FeaturesConfig) -> dict[str, Plugin]:
    """The plug-ins of ``features.plugins``, by NAME in the configured order (empty: none)."""
    out: dict[str, Plugin] = {}
    for spec in cfg.plugins:
        family, module = _locate(spec)
        problem = _contract_problem(family)
        if problem:
            raise PluginError(
                "features.plugins", f"plug-in {spec!r}: {problem}", "see docs/feature-plugins.md"
            )
        name = family.NAME
        if name in FAMILIES or name in out:
            taken = "a built-in family" if name in FAMILIES else f"plug-in {out[name].spec!r}"
            raise PluginError(
                "features.plugins", f"plug-in {spec!r}: NAME {name!r} is already {taken}", "rename the family"
            )
        out[name] = Plugin(
            spec=spec,
            family=family,
            module=module,
            params=_params(family, cfg.plugin_params.get(name)),
            row_units=tuple(RowUnit(u) for u in getattr(family, "ROW_UNITS", tuple(RowUnit))),
        )
    unknown = sorted(set(cfg.plugin_params) - set(out))
    if unknown:
        raise PluginError(
            f"features.plugin_params.{unknown[0]}",
            f"settings for {unknown} but no loaded plug-in has that NAME ({sorted(out) or 'none loaded'})",
            "add the plug-in to features.plugins or remove the settings",
        )
    return out


def with_plugins(plugins: Mapping[str, Plugin]) -> dict[str, Family]:
    """The built-in families and the loaded plug-ins, by name."""
    return {**FAMILIES, **{name: p.family for name, p in plugins.items()}}


def stack_families(row_unit: RowUnit, plugins: Mapping[str, Plugin] | None = None) -> tuple[str, ...]:
    """The families of a row unit's stack: the built-in ones, then the plug-ins that join it, in the
    configured order (:func:`load_plugins`)."""
    extra = tuple(name for name, p in (plugins or {}).items() if row_unit in p.row_units)
    return (*STACK_FAMILIES[row_unit], *extra)
