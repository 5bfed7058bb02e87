"""Load a configuration: packaged TOML profile or a TOML file, then ``--set`` overrides.

Resolution order: model defaults < profile (or ``--config FILE``) < each ``--set section.key=value``
in order. Values in ``--set`` are parsed as TOML (``3``, ``0.5``, ``true``, ``"x"``, ``[5, 20]``);
anything that is not valid TOML is taken as a bare string (``data.data_source=ohlcv``).

This module is the one home of dotted overrides: ``--set``, a tuning trial's parameters and a
committee member's seed (:func:`with_overrides`) all take :func:`apply_override` and
:func:`validate_tree`, so a value set by code is typed and bounded as a hand-written one.

The resolved config is hashed (SHA-256 of its canonical JSON) for cache keys and run ids, and
written next to every artefact with :func:`write_resolved`.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from foxhunt.atomic import write_json
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import ConfigError, door, setting

DEFAULT_PROFILE = "smoke"
# The profile of `foxhunt run`, `seeds` and `tune` given neither --profile nor --config on a machine
# with a CUDA device: thousands of parallel episodes and full learner batches (smoke's CPU sizes would
# leave the GPU idle).
GPU_PROFILE = "gpu"


def default_profile(cuda: bool) -> str:
    """The profile a training command uses when none is named: :data:`GPU_PROFILE` with a CUDA device
    (``cuda``), else :data:`DEFAULT_PROFILE`. The caller asks torch; this module never imports it."""
    return GPU_PROFILE if cuda else DEFAULT_PROFILE


def available_profiles() -> list[str]:
    """Names of the TOML profiles shipped inside the package."""
    folder = resources.files("foxhunt.config") / "profiles"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def _read_toml(where: str, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(where, f"not valid TOML ({exc})", "fix the TOML syntax") from exc


def _profile_dict(name: str) -> dict[str, Any]:
    if name not in available_profiles():
        raise ConfigError(
            f"--profile {name}", "unknown profile", f"use one of {', '.join(available_profiles())}"
        )
    text = (resources.files("foxhunt.config") / "profiles" / f"{name}.toml").read_text()
    return _read_toml(f"profile {name}", text)


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def assignment(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` reads it: the value as TOML (JSON's text of a bool, number or string is
    TOML's too)."""
    return f"{key}={json.dumps(value)}"


def apply_override(tree: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Return a copy of ``tree`` with one ``section.key=value`` assignment applied."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key or "." not in key:
        raise ConfigError(
            setting(assignment),
            "expected section.key=value",
            f"write e.g. {setting('data.bar_seconds=60')}",
        )
    out = json.loads(json.dumps(tree, default=str))
    node = out
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(setting(assignment), f"{part} is a value, not a section", "check the key path")
        node = child
    node[leaf] = _parse_value(raw.strip())
    return out


def _allowed(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """Describe what is allowed at ``loc`` (the known keys of the enclosing section)."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        field = current.model_fields.get(str(part)) if current else None
        ann = field.annotation if field else None
        current = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    if current is None:
        return "see `foxhunt config show`"
    return "known keys here: " + ", ".join(current.model_fields)


def validate_tree(
    tree: dict[str, Any], where: str = "config", *, cross_checks: bool = True
) -> FoxhuntConfig | None:
    """Build the config model, turning pydantic's errors into one :class:`ConfigError`.

    ``cross_checks=False`` lets the config's cross-field checks (errors located at the root, such
    as the labels' barrier against the env plan) pass, returning ``None``: one ``--set`` of a pair
    of coupled keys is checked on its own, and the pair once all overrides are applied."""
    try:
        return FoxhuntConfig.model_validate(tree)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        if not loc:  # a model-level check across sections
            if not cross_checks:
                return None
            msg = str(err["msg"]).removeprefix("Value error, ")
            fix = f"set the keys it names together ({setting('a=x', 'b=x')})"
            raise ConfigError(where, msg, fix) from exc
        key = ".".join(str(p) for p in loc)
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            raise ConfigError(
                f"{where}: {key}", f"unknown key (value {value!r})", _allowed(FoxhuntConfig, loc)
            ) from exc
        raise ConfigError(
            f"{where}: {key}", f"invalid value {value!r}: {err['msg']}", "allowed: " + err["msg"]
        ) from exc


def load_config(
    profile: str | None = None,
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> FoxhuntConfig:
    """Resolve a config from a profile name or a TOML file (not both) and overrides."""
    if profile is not None and config_file is not None:
        raise ConfigError(
            door("--profile/--config", "profile/file"),
            "both given",
            door("pass one of --profile or --config", "pass one of profile= or file="),
        )
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(path, "config file not found", f"check the {door('--config', 'file=')} path")
        try:
            text = path.read_bytes().decode("utf-8")  # TOML is UTF-8 by definition, whatever the locale
        except UnicodeDecodeError as exc:
            raise ConfigError(
                str(path), f"not UTF-8 text (byte {exc.start} cannot be decoded)", "save the file as UTF-8"
            ) from None
        tree, where = _read_toml(str(path), text), str(path)
    else:
        name = profile or DEFAULT_PROFILE
        tree, where = _profile_dict(name), f"profile {name}"
    validate_tree(tree, where)  # errors in the profile itself are reported against the profile
    return _overridden(tree, overrides, where)


def _overridden(tree: dict[str, Any], overrides: Sequence[str], where: str) -> FoxhuntConfig:
    """The config of ``tree`` (from ``where``) with every ``section.key=value`` of ``overrides`` set, in
    order, the whole validated; on failure the first assignment that breaks the tree is blamed."""
    final = tree
    for each in overrides:
        final = apply_override(final, each)
    if overrides:
        try:
            cfg = validate_tree(final, f"{where} with {setting(*overrides)}")
            assert cfg is not None  # cross checks on: an invalid tree raised
            return cfg
        except ConfigError:
            # Blame the first --set that breaks the tree. Only on failure: coupled keys of one section
            # (env.branches.magnitude with its magnitude_fractions) are valid together, not one by one.
            for each in overrides:
                tree = apply_override(tree, each)
                validate_tree(tree, setting(each), cross_checks=False)
            raise
    cfg = validate_tree(tree, where)
    assert cfg is not None  # cross checks on: an invalid tree raised
    return cfg


def with_overrides(cfg: FoxhuntConfig, values: Mapping[str, Any], where: str) -> FoxhuntConfig:
    """``cfg`` with every dotted ``key: value`` of ``values`` set, in order, as ``--set key=value``
    sets it (a tuning trial's parameters, a committee member's seed); ``where`` names the setter in
    an error."""
    return _overridden(cfg.model_dump(mode="json"), [assignment(k, v) for k, v in values.items()], where)


def canonical_json(cfg: FoxhuntConfig) -> str:
    """Sorted-key JSON of every resolved value (defaults included): the hashed form."""
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def config_hash(cfg: FoxhuntConfig, section: str | None = None) -> str:
    """Stable 16-hex-digit SHA-256 of the resolved config (or one section of it)."""
    payload = canonical_json(cfg)
    if section is not None:
        payload = json.dumps(cfg.model_dump(mode="json")[section], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def write_resolved(cfg: FoxhuntConfig, path: str | Path) -> Path:
    """Write the resolved config (with its hash) as JSON, atomically, and return the path."""
    body = {"config_hash": config_hash(cfg), "config": cfg.model_dump(mode="json")}
    return write_json(path, body, indent=2, sort_keys=True)
