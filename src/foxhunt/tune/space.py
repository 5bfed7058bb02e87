"""The search space: which config values a study sets, checked and applied as ``--set`` would.

A trial's parameters reach the config through :func:`foxhunt.config.loader.with_overrides`, the path
every ``--set section.key=value`` takes, so a sampled value is typed and bounded by the same field
that a hand-written override meets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foxhunt.agent.config import Algo, only_for
from foxhunt.config.loader import apply_override, assignment, validate_tree
from foxhunt.config.models import FoxhuntConfig
from foxhunt.errors import ConfigError
from foxhunt.tune.config import ParamSpaceConfig, TuneConfig

if TYPE_CHECKING:
    import optuna

# Sections a study may not set: its own definition.
_FORBIDDEN = ("tune",)
# A value a study may not search: its trials are ranked on the folds' selection periods, which
# train.selection = last removes; every trial trains with train_tail (foxhunt.tune.objective.trial_config).
_RANKING = "train.selection"
_ALGO = "agent.algo"
# A setting each learner reads, named in a refusal's fix.
_EXAMPLE = {Algo.DQN: "agent.learn.lr", Algo.PPO: "agent.ppo.lr"}


def _learners(cfg: FoxhuntConfig) -> set[Algo]:
    """The learners the study's trials train: the config's ``agent.algo``, or its searched choices."""
    space = cfg.tune.params.get(_ALGO)
    if space is None or space.choices is None:
        return {cfg.agent.algo}
    return {Algo(str(c)) for c in space.choices if str(c) in {a.value for a in Algo}}


def _unread(cfg: FoxhuntConfig, key: str) -> ConfigError | None:
    """The refusal of ``key`` where no learner the trials train reads it (``agent.ppo.lr`` under
    ``agent.algo = dqn``, ``agent.learn.lr`` under ppo: every trial would train alike), else None."""
    owner, learners = only_for(key), _learners(cfg)
    if owner is None or owner in learners:
        return None
    algo = " or ".join(sorted(a.value for a in learners))
    examples = ", ".join(_EXAMPLE[a] for a in sorted(learners))
    return ConfigError(
        f"tune.params.{key}",
        f"only agent.algo = {owner.value} reads it, and the trials train agent.algo = {algo}",
        f"search what they read ({examples}, agent.network.hidden ...) or set agent.algo = {owner.value}",
    )


def _refusal(tree: dict[str, Any], key: str, probe: Any) -> tuple[str, str] | None:
    """Why the config refuses ``key`` set to ``probe`` alone (problem, fix), or None: accepted."""
    try:
        validate_tree(apply_override(tree, assignment(key, probe)), f"tune.params.{key}", cross_checks=False)
    except ConfigError as err:
        return err.problem, err.fix
    return None


def check_space(cfg: FoxhuntConfig) -> None:
    """Refuse a space whose key is not a config value or whose range or choice the value refuses.

    Every probe (:meth:`ParamSpaceConfig.probes`) is set alone on ``cfg`` as ``--set`` sets it and the
    config validated; a coupled check across sections (the labels' barrier and the env plan) is left
    to the trial's whole set (:func:`foxhunt.config.loader.with_overrides`). A study runs it where it
    starts (:func:`foxhunt.tune.objective.trial_config`), not the config's own validation: a config
    that is not tuned does not pay for it, and the config does not import its tuner."""
    if not cfg.tune.params:
        return
    base = cfg.model_dump(mode="json")
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
        node: Any = base
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(
                    where, "unknown config value", "use a key path that `foxhunt config show` prints"
                )
            node = node[part]
        if isinstance(node, dict):
            raise ConfigError(where, "is a config section, not a value", "name one of its keys")
        for probe in space.probes():
            refused = _refusal(base, key, probe)
            if refused is not None:
                raise ConfigError(where, f"{probe!r} is refused: {refused[0]}", refused[1])
        if (unread := _unread(cfg, key)) is not None:
            raise unread


def suggest(trial: optuna.Trial, key: str, space: ParamSpaceConfig) -> Any:
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
