"""The config as TOML: every profile reads back to the same config, awkward values survive, and a
None that TOML cannot say is refused instead of silently changed."""

from __future__ import annotations

import math
import tomllib

import pytest
from pydantic import BaseModel, ConfigDict

from foxhunt.config.loader import available_profiles, config_hash, load_config, validate_tree
from foxhunt.config.toml_text import config_toml


@pytest.mark.parametrize("profile", available_profiles())
def test_every_profile_reads_back_to_the_same_hash(profile: str) -> None:
    cfg = load_config(profile=profile)
    again = validate_tree(tomllib.loads(config_toml(cfg, "a header\nof two lines")))
    assert again is not None and config_hash(again) == config_hash(cfg)


class Inner(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str = 'say "hi"\n\tthen \\ leave\x7f'
    pairs: tuple[tuple[float, float], ...] = ((0.0, 1.5), (2.25, -1e-05))
    big: float = 1e300
    inf: float = math.inf
    maybe: int | None = None


class Outer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    flag: bool = True
    inner: Inner = Inner()
    weird_keys: dict[str, int] = {"a.b": 1, "plain": 2}
    empty: tuple[int, ...] = ()


def test_awkward_values_survive_and_none_is_left_to_its_default() -> None:
    text = config_toml(Outer())
    assert "# maybe: not set (None)" in text and '"a.b" = 1' in text
    assert Outer.model_validate(tomllib.loads(text)) == Outer()


def test_a_none_that_is_not_the_default_is_refused() -> None:
    class Defaulted(BaseModel):
        n: int | None = 3

    with pytest.raises(ValueError, match="n is None but defaults to 3"):
        config_toml(Defaulted(n=None))
