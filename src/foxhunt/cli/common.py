"""What the commands share between parsing and calling a stage: the config from ``--profile``,
``--config`` and ``--set``; the progress display; the files of ``--data PATH...``; the feature cache
of ``--cache`` or ``--data``.

Start-up time: `foxhunt --help` must not wait for torch, LightGBM, numba or pandas (seconds), so
this module imports only typer, rich and light foxhunt modules at the top; every helper imports
what it needs (the config too: its models pull in the stages' parameter classes) in its body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from foxhunt.cli.present import console, line
from foxhunt.console import Reporter, Verbosity
from foxhunt.data.schemas import RowUnit
from foxhunt.errors import FoxhuntError

if TYPE_CHECKING:
    from foxhunt.config.models import FoxhuntConfig


def reporter(quiet: bool, verbose: bool = False) -> Reporter:
    """The progress display of a command: bars on a terminal, timestamped lines otherwise."""
    if quiet and verbose:
        raise FoxhuntError("--quiet/--verbose", "both given", "pass at most one of them")
    level = Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL
    return Reporter.for_stderr(level, console)


@contextmanager
def step(description: str, progress: Reporter | bool) -> Iterator[None]:
    """A step without a count (a spinner with elapsed time, or a start and an end line).
    ``progress`` may be a command's ``--quiet`` flag instead of its reporter."""
    rep = reporter(progress) if isinstance(progress, bool) else progress
    with rep.task(description):
        yield


def config_of(profile: str | None, config: Path | None, sets: list[str] | None) -> FoxhuntConfig:
    """The resolved config of ``--profile`` or ``--config`` and the ``--set`` assignments."""
    from foxhunt.config.loader import load_config

    return load_config(profile=profile, config_file=config, overrides=sets or ())


def training_config(
    profile: str | None, config: Path | None, sets: list[str], progress: Reporter
) -> tuple[FoxhuntConfig, str | None]:
    """The config of `run`, `seeds` and `tune`, and the profile named for it (None: ``--config``, or
    the default profile, which the caller records as "default").

    Given neither ``--profile`` nor ``--config``, a machine with a CUDA device gets the ``gpu``
    profile (announced in one line) instead of smoke's CPU sizes, unless the ``--set`` keys put
    the run on the CPU (``run.device=cpu``)."""
    import torch

    from foxhunt.config.loader import DEFAULT_PROFILE, default_profile
    from foxhunt.config.models import Device

    if profile is not None or config is not None:
        return config_of(profile, config, sets), profile
    chosen = default_profile(torch.cuda.is_available())
    cfg = config_of(chosen, None, sets)
    if chosen == DEFAULT_PROFILE or cfg.run.device is Device.CPU:
        return (cfg if chosen == DEFAULT_PROFILE else config_of(DEFAULT_PROFILE, None, sets)), None
    progress.say(
        f"no --profile or --config: {torch.cuda.get_device_name()} found, so the {chosen} profile "
        f"({cfg.train.members} members of {cfg.train.envs:,} episodes, batch {cfg.agent.learn.batch:,}, "
        f"trained at once; --profile {DEFAULT_PROFILE} for one agent)"
    )
    return cfg, chosen


def write_resolved(cfg: FoxhuntConfig, path: Path) -> Path:
    """:func:`foxhunt.config.loader.write_resolved`, imported when a command runs (start-up time)."""
    from foxhunt.config import loader

    return loader.write_resolved(cfg, path)


def cache_from(
    ctx: typer.Context,
    data: list[Path] | None,
    cache_path: Path | None,
    cfg: FoxhuntConfig,
    out_dir: Path,
    progress: Reporter,
    command: str,
    asked: list[str] | None,
) -> tuple[Any, FoxhuntConfig]:
    """The feature cache of ``--cache FILE`` once the leak guard has passed the files it was built
    from, or built (or reused) from ``--data PATH...`` beside the guard's cuts
    (:func:`foxhunt.pipeline.guarded_features`), and the config to use with it:
    with ``--cache``, the cache's own row unit, data source, features and labels (an explicit
    ``--set`` that contradicts them is refused) unless ``asked`` is None (a checkpoint's config,
    which the cache must match as it is). A leak exits 3 either way."""
    from foxhunt import pipeline
    from foxhunt.dataset.cache import config_from_cache

    one_source(data, cache_path, command)
    if cache_path is not None and asked is not None:
        cfg = config_from_cache(cache_path, cfg, asked)
    files = [] if cache_path is not None else data_paths(data or [], ctx)
    into, where = out_dir / "cache", f"foxhunt {command}"
    cache = pipeline.guarded_features(
        files, cfg, into, where, cache_path=cache_path, progress=progress, say=line
    )
    return cache, cfg


def set_keys(overrides: list[str]) -> list[str]:
    """The ``section.key`` names of ``--set section.key=value`` assignments."""
    return [a.partition("=")[0].strip() for a in overrides]


def remembered(files: list[Path], cfg: FoxhuntConfig, out_dir: Path, sets: list[str] | None) -> FoxhuntConfig:
    """``cfg`` with the settings of a cache in ``out_dir/cache`` built before from the same files
    (``foxhunt features build --data FILES --out OUT/cache --set ...``), said in one line: a setting a
    short file needed (``data.bar_seconds``) is given once, not on every command."""
    from foxhunt.dataset.remember import remembered_config

    cfg, kept = remembered_config(files, cfg, out_dir / "cache", set_keys(list(sets or [])))
    if kept:
        line(
            f"settings of the feature cache in {out_dir / 'cache'} (built from these files): "
            + ", ".join(kept)
            + " (--set a key to change it)"
        )
    return cfg


def with_row_unit(sets: list[str] | None, row_unit: RowUnit | None) -> list[str]:
    """The ``--set`` assignments, then ``--row-unit`` as ``data.row_unit=...`` when given: the option
    is a shorthand for that key, and as the last assignment it wins over a ``--set`` of it."""
    return list(sets or []) + ([f"data.row_unit={row_unit.value}"] if row_unit else [])


def one_source(
    data: list[Path] | None, cache_path: Path | None, command: str, *, required: bool = True
) -> None:
    """Refuse ``--data`` together with ``--cache`` and, when ``required``, neither of them: the data
    would be read twice or from two places."""
    if (data is not None and cache_path is not None) or (required and data is None and cache_path is None):
        rule = "exactly" if required else "at most"
        raise FoxhuntError(
            "--data/--cache", f"pass {rule} one of --data or --cache", f"see foxhunt {command} --help"
        )


def data_paths(data: list[Path], ctx: typer.Context) -> list[Path]:
    """The files of ``--data PATH...``: the option's values and the paths that followed them."""
    extra = list(ctx.args)
    flags = [a for a in extra if a.startswith("-")]
    if flags:
        raise FoxhuntError(" ".join(flags), "unknown option", "see --help")
    return [*data, *(Path(a) for a in extra)]


def market_files(
    ctx: typer.Context, data: list[Path] | None, cfg: FoxhuntConfig, out_dir: Path
) -> list[Path]:
    """``--data PATH...``, or the embedded synthetic market (the config's ``[synth]``) written into
    ``out_dir/market`` when no data is given (as ``foxhunt run`` does)."""
    from foxhunt.data.synth import write_synthetic

    if data:
        return data_paths(data, ctx)
    return write_synthetic(cfg.synth, out_dir / "market")


def seed_list(seeds: str) -> list[int]:
    """``--seeds 7,8,9`` as distinct non-negative seeds, else one line naming the option."""
    try:
        chosen = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        chosen = []
    if not chosen or len(set(chosen)) != len(chosen) or min(chosen) < 0:
        raise FoxhuntError("--seeds", f"{seeds!r} is not a list of distinct seeds", "pass e.g. --seeds 7,8,9")
    return chosen
