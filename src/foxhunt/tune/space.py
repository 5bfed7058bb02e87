"""The search space: which config values a study sets, checked and applied as ``--set`` would.

A trial's parameters reach the config through :func:`foxhunt.config.loader.apply_override` and
:func:`foxhunt.config.loader.validate_tree`, the path every ``--set section.key=value`` takes, so a
sampled value is typed and bounded by the same field that a hand-written override meets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from foxhunt.errors import ConfigError
from foxhunt.tune.config import ParamSpace, TuneConfig

if TYPE_CHECKING:
    import optuna

    from foxhunt.config.models import FoxhuntConfig

# Sections a study may not set: its own definition.
_FORBIDDEN = ("tune",)
# A value a study may not search: its trials are ranked on the folds' selection periods, which
# train.selection = last removes; every trial trains with train_tail (foxhunt.tune.objective.trial_config).
_RANKING = "train.selection"


def assignment(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` reads it: the value as TOML (JSON's text of a bool, number or string is
    TOML's too)."""
    return f"{key}={json.dumps(value)}"


def _without_space(cfg: FoxhuntConfig) -> dict[str, Any]:
    """``cfg``'s tree with an empty ``[tune]``: validating a probe does not re-check the space."""
    tree = cfg.model_dump(mode="json")
    tree["tune"] = {}
    return tree


def _apply(tree: dict[str, Any], values: Mapping[str, Any], where: str, cross_checks: bool) -> Any:
    from foxhunt.config.loader import apply_override, validate_tree

    for key, value in values.items():
        tree = apply_override(tree, assignment(key, value))
        validate_tree(tree, f"{where} {assignment(key, value)}", cross_checks=False)
    return tree, validate_tree(tree, where, cross_checks=cross_checks)


# (key, probe, the probed value's section) -> the refusal (problem, fix), or None: accepted. A probe's
# verdict depends on its own section only (the cross-section checks are off while probing), and the
# config is validated again and again (every --set, every seed): each probe is checked once.
_VERDICTS: dict[tuple[str, str, str], tuple[str, str] | None] = {}
_MAX_VERDICTS = 10_000


def _refusal(tree: dict[str, Any], section: Any, key: str, probe: Any) -> tuple[str, str] | None:
    from foxhunt.config.loader import apply_override, validate_tree

    memo = (key, json.dumps(probe), json.dumps(section, sort_keys=True))
    if memo not in _VERDICTS:
        if len(_VERDICTS) >= _MAX_VERDICTS:
            _VERDICTS.clear()
        try:
            probed = apply_override(tree, assignment(key, probe))
            validate_tree(probed, f"tune.params.{key}", cross_checks=False)
            _VERDICTS[memo] = None
        except ConfigError as err:
            _VERDICTS[memo] = (err.problem, err.fix)
    return _VERDICTS[memo]


def check_space(cfg: FoxhuntConfig) -> None:
    """Refuse a space whose key is not a config value or whose range or choice the value refuses.

    Every probe (:meth:`ParamSpace.probes`) is set alone on ``cfg`` as ``--set`` sets it and the
    config validated; a coupled check across sections (the labels' barrier and the env plan) is left
    to the trial's whole set (:func:`with_params`)."""
    if not cfg.tune.params:
        return
    base = _without_space(cfg)
    for key, space in cfg.tune.params.items():
        where = f"tune.params.{key}"
        if key.split(".")[0] in _FORBIDDEN or "." not in key:
            raise ConfigError(where, "not a searchable config value", "name a value such as agent.learn.lr")
        if key == _RANKING:
            raise ConfigError(
                where,
                "decides where trials are ranked (the folds' selection periods), so it cannot be searched",
                f"remove {where} (tune trains every trial with train.selection = train_tail)",
            )
        parent: Any = None
        node: Any = base
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(
                    where, "unknown config value", "use a key path that `foxhunt config show` prints"
                )
            parent, node = node, node[part]
        if isinstance(node, dict):
            raise ConfigError(where, "is a config section, not a value", "name one of its keys")
        for probe in space.probes():
            refused = _refusal(base, parent, key, probe)
            if refused is not None:
                raise ConfigError(where, f"{probe!r} is refused: {refused[0]}", refused[1])


def with_params(cfg: FoxhuntConfig, params: Mapping[str, Any], where: str = "trial") -> FoxhuntConfig:
    """``cfg`` with every parameter set (in order, each checked as one ``--set``, then all together)."""
    _, resolved = _apply(cfg.model_dump(mode="json"), params, where, cross_checks=True)
    return resolved


def suggest(trial: optuna.Trial, key: str, space: ParamSpace) -> Any:
    """The trial's value of one parameter (Optuna's distribution for the space's kind)."""
    if space.choices is not None:
        return trial.suggest_categorical(key, list(space.choices))
    assert space.low is not None and space.high is not None
    if space.is_int:
        step = int(space.step or 1)
        return trial.suggest_int(key, int(space.low), int(space.high), step=step, log=space.log)
    return trial.suggest_float(key, float(space.low), float(space.high), step=space.step, log=space.log)


def sample(trial: optuna.Trial, tune: TuneConfig) -> dict[str, Any]:
    """Every parameter of the space sampled for ``trial``, in the space's order."""
    return {key: suggest(trial, key, space) for key, space in tune.params.items()}
