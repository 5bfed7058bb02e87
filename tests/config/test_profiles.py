"""The packaged profiles document only what they change and why (docs/design.md §9).

Two checks on every profile under ``src/foxhunt/config/profiles``:

* no key is set to its default value (a default restated is noise that hides the real changes, and
  goes stale silently when the default moves);
* every key carries a comment, on its own line (``key = 1  # why``) or on its group: a paragraph
  (lines between blank lines) whose first lines are comments, or whose table header carries one.

Each check is a small function tested first on hand-written TOML, then run on the profiles.
"""

from __future__ import annotations

import re
import tomllib
import typing
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from foxhunt.config.loader import available_profiles
from foxhunt.config.models import FoxhuntConfig

_KEY_LINE = re.compile(r"""^\s*(?:[A-Za-z0-9_-]+|"[^"]*")(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"))*\s*=""")
_HEADER_LINE = re.compile(r"^\s*\[")


def _profile_text(name: str) -> str:
    return (resources.files("foxhunt.config") / "profiles" / f"{name}.toml").read_text()


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def default_keys(tree: dict[str, Any], model: type[BaseModel], path: str = "") -> Iterator[str]:
    """Dotted paths of the leaves of ``tree`` (a profile's TOML) whose value is ``model``'s default.

    A table under a sub-model field is walked into; so is each entry of a ``dict[str, Model]``
    (``tune.params``: an entry is new, but a field inside it can still restate its default). Values
    are compared in their JSON form after validation, so ``"mirror"`` equals ``Symmetry.MIRROR`` and
    ``[5, 20]`` equals ``(5, 20)``."""
    for key, value in tree.items():
        field = model.model_fields[key]
        where = f"{path}.{key}" if path else key
        sub = _model_of(field.annotation)
        if isinstance(value, dict) and sub is not None:
            yield from default_keys(value, sub, where)
            continue
        args = typing.get_args(field.annotation)
        entry = _model_of(args[1]) if typing.get_origin(field.annotation) is dict and len(args) == 2 else None
        if isinstance(value, dict) and entry is not None:
            for name, item in value.items():
                yield from default_keys(item, entry, f'{where}."{name}"')
            continue
        adapter = TypeAdapter(field.annotation)
        default = field.get_default(call_default_factory=True)
        if adapter.dump_python(adapter.validate_python(value), mode="json") == adapter.dump_python(
            default, mode="json"
        ):
            yield where


def _has_comment(line: str) -> bool:
    """Whether a key or header line ends in a ``# comment`` (a ``#`` inside a string does not count)."""
    return "#" in re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)


def undocumented_keys(text: str) -> list[str]:
    """The key lines of a TOML text that carry no comment, on themselves or on their group.

    A group is a paragraph (a run of non-blank lines). It is documented when a full-line comment
    or a header with an inline comment comes before its first key; otherwise each key line needs
    its own inline comment."""
    missing: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        keys = [i for i, line in enumerate(lines) if _KEY_LINE.match(line)]
        if not keys:
            continue
        lead = lines[: keys[0]]
        if any(line.lstrip().startswith("#") for line in lead) or any(
            _HEADER_LINE.match(line) and _has_comment(line) for line in lead
        ):
            continue
        missing += [lines[i].strip() for i in keys if not _has_comment(lines[i])]
    return missing


# --- the checks on hand-written TOML ------------------------------------------------------------


def test_default_keys_finds_a_restated_default_and_only_it() -> None:
    tree = tomllib.loads(
        """
        [run]
        seed = 7
        [data]
        bar_seconds = 30
        row_unit = "snapshot"
        [agent.network]
        symmetry = "none"
        [alpha]
        horizons = [5, 20]
        """
    )
    # bar_seconds 30 and symmetry none are the defaults; seed 7, snapshot rows and horizons are not.
    assert list(default_keys(tree, FoxhuntConfig)) == ["data.bar_seconds", "agent.network.symmetry"]


def test_default_keys_walks_into_the_entries_of_a_dict_of_models() -> None:
    tree = tomllib.loads(
        """
        [tune.params."agent.learn.lr"]
        low = 1e-4
        high = 1e-2
        log = false
        """
    )
    # The entry itself is a change (the default space is empty); log = false restates
    # ParamSpaceConfig's default.
    assert list(default_keys(tree, FoxhuntConfig)) == ['tune.params."agent.learn.lr".log']


def test_undocumented_keys_accepts_a_group_comment_a_header_comment_or_an_inline_one() -> None:
    text = """# why the run changes
[run]
seed = 7
threads = 1

[data]  # why bars of a minute
bar_seconds = 60

[train]
epochs = 6  # why six
envs = 64  # why 64
"""
    assert undocumented_keys(text) == []


def test_undocumented_keys_names_each_key_without_a_comment() -> None:
    text = """# a comment that a blank line separates from the keys

[run]
seed = 7
threads = 1  # why one thread

[train]
epochs = 6
name = "a # inside a string is no comment"
"""
    assert undocumented_keys(text) == ["seed = 7", "epochs = 6", 'name = "a # inside a string is no comment"']


# --- the checks on the packaged profiles ---------------------------------------------------------


@pytest.mark.parametrize("profile", available_profiles())
def test_a_profile_sets_no_key_to_its_default(profile: str) -> None:
    tree = tomllib.loads(_profile_text(profile))
    restated = list(default_keys(tree, FoxhuntConfig))
    assert restated == [], f"profile {profile} restates defaults (drop them): {restated}"


@pytest.mark.parametrize("profile", available_profiles())
def test_every_key_of_a_profile_says_why(profile: str) -> None:
    missing = undocumented_keys(_profile_text(profile))
    assert missing == [], f"profile {profile}: add a comment (on the key or its group) to {missing}"


def test_production_is_the_full_profile_on_a_month() -> None:
    """The production profile is the full profile on 21 sessions of the smoke market with five folds
    (the run its header reports); nothing else differs, the tune space included, so the full profile's
    measurements hold for it. Its first sessions are smoke's bit for bit (sessions are simulated alone
    from the seed), with the full action space."""
    from foxhunt.config.loader import load_config, with_overrides

    full, production = load_config("full"), load_config("production")
    measured = with_overrides(full, {"synth.sessions": 21, "folds.n_folds": 5}, "the measured run")
    assert production.model_dump() == measured.model_dump()
    smoke = load_config("smoke")
    assert production.synth.model_copy(update={"sessions": smoke.synth.sessions}) == smoke.synth
    assert production.env.branches == FoxhuntConfig().env.branches
    assert production.agent.algo == "ppo" and production.env.plan.barrier == smoke.env.plan.barrier


def test_full_is_the_gpu_profile_with_ppo_and_every_branch() -> None:
    """The full profile is what docs/results/2026-12-07-ppo-full-action-unseen.md measured: the gpu
    profile with PPO, 20 epochs, one agent a run and the default (full) action space; nothing else
    differs, so its numbers are the profile's."""
    from foxhunt.config.loader import load_config, with_overrides

    measured = with_overrides(
        load_config("gpu"),
        {
            "agent.algo": "ppo",
            "train.epochs": 20,
            "train.members": 1,
            "env.branches.magnitude": 3,
            "env.branches.magnitude_fractions": [0.25, 0.5, 1.0],
            "env.branches.order_type": 3,
            "env.branches.urgency": 3,
        },
        "the measured run",
    )
    full = load_config("full")
    assert full.env.branches == FoxhuntConfig().env.branches
    assert full.model_dump(exclude={"tune"}) == measured.model_dump(exclude={"tune"})
