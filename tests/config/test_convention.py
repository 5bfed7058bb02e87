"""One config convention (docs/design.md §9): each stage's section beside its code, composed in one place.

* A stage's config models live in ``foxhunt.<stage>.config``; the parameters of a concept that
  several stages share live with the concept in ``foxhunt.domain.<concept>``; a feature family
  declares its ``<Family>Config`` in its own module (the plug-in contract); the root and its ``[run]``
  section are ``foxhunt.config.models``.
* The ``foxhunt.config`` package holds only the machinery: the base model, the loader, the root
  model, the TOML writer and the profiles.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from importlib import resources
from typing import Any

from pydantic import BaseModel

from foxhunt.config.models import FoxhuntConfig
from foxhunt.features.registry import FAMILIES

_STAGE_SECTION = re.compile(r"^foxhunt\.[a-z_]+\.config$")
_DOMAIN_CONCEPT = re.compile(r"^foxhunt\.domain\.[a-z_]+$")


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The config models an annotation holds: itself, or inside ``X | None``, ``dict[str, X]`` ..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def config_models(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """Every ``(dotted key, model)`` reachable from ``model``'s fields, depth first."""
    for name, field in model.model_fields.items():
        for sub in _models_in(field.annotation):
            where = f"{path}.{name}" if path else name
            yield where, sub
            yield from config_models(sub, where)


def misplaced(models: list[tuple[str, type[BaseModel]]], families: set[str]) -> list[str]:
    """The keys whose model is defined outside the homes the convention allows, with its module."""
    family_modules = {f"foxhunt.features.{name}" for name in families}
    out = []
    for key, model in models:
        module = model.__module__
        if key == "run" and module == "foxhunt.config.models":
            continue  # the root's own section
        if _STAGE_SECTION.match(module):
            continue
        if _DOMAIN_CONCEPT.match(module) or module in family_modules:
            continue
        out.append(f"{key}: {module}")
    return out


def test_misplaced_names_a_section_kept_inside_a_stage_module() -> None:
    class Stray(BaseModel):
        x: int = 0

    Stray.__module__ = "foxhunt.env.sizing"  # a section defined in the code module that uses it
    models = [("env.sizing", Stray), ("run", Stray)]
    assert misplaced(models, set()) == ["env.sizing: foxhunt.env.sizing", "run: foxhunt.env.sizing"]
    Stray.__module__ = "foxhunt.features.ofi"  # a feature family's config in its own module
    assert misplaced([("features.ofi", Stray)], {"ofi"}) == []
    assert misplaced([("features.ofi", Stray)], set()) == ["features.ofi: foxhunt.features.ofi"]
    Stray.__module__ = "foxhunt.domain.barrier"  # a shared concept's parameters beside the concept
    assert misplaced([("env.plan.barrier", Stray)], set()) == []


def test_every_section_lives_beside_its_stage_or_its_shared_concept() -> None:
    models = list(config_models(FoxhuntConfig))
    assert {key for key, _ in models} >= {"data", "synth", "features", "folds", "env.sizing", "env.rewards"}
    assert misplaced(models, set(FAMILIES)) == []


def test_the_config_package_holds_only_the_machinery() -> None:
    package = resources.files("foxhunt.config")
    modules = {p.name for p in package.iterdir() if p.name.endswith(".py")}
    assert modules == {"__init__.py", "base.py", "loader.py", "models.py", "toml_text.py"}
