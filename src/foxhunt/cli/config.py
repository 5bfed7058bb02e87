"""``foxhunt config``: the resolved configuration and the packaged profiles."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from foxhunt.cli import present
from foxhunt.cli.common import config_of, reporter
from foxhunt.cli.options import ConfigOpt, ProfileOpt, QuietOpt, SetOpt, VerboseOpt
from foxhunt.errors import FoxhuntError


def config_show(
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    as_toml: Annotated[
        bool, typer.Option("--toml", help="Print TOML that --config FILE reads back (the same hash).")
    ] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print the resolved configuration and its hash (a table, --json, or --toml to save and edit:
    `foxhunt config show --profile smoke --toml > my.toml`, then `--config my.toml`)."""
    from foxhunt.config.loader import config_hash
    from foxhunt.config.toml_text import config_toml

    reporter(quiet, verbose)  # nothing to show while it runs; the flags are checked as everywhere
    if as_json and as_toml:
        raise FoxhuntError("--json/--toml", "both given", "pass at most one of them")
    cfg = config_of(profile, config, set_)
    digest = config_hash(cfg)
    if as_toml:
        # Plain write: rich would wrap long lines and read [section] headers as markup.
        sys.stdout.write(config_toml(cfg, f"foxhunt config {digest}: use it with --config FILE"))
        return
    body = {"config_hash": digest, "config": cfg.model_dump(mode="json")}
    if as_json:
        present.as_json(body)
        return
    present.config_table(digest, body["config"])


def config_profiles(quiet: QuietOpt = False, verbose: VerboseOpt = False) -> None:
    """List the packaged profiles."""
    from foxhunt.config.loader import available_profiles

    reporter(quiet, verbose)
    present.each(available_profiles())
