"""Output folders: refusals before any work, the recorded config of a resume, stale temp files.
(The same rules through the command line: tests/corpus/test_runs.py.)"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from foxhunt.atomic import atomic_path, is_stale_temp, remove_stale_temps
from foxhunt.config.loader import load_config, write_resolved
from foxhunt.errors import FoxhuntError, FrontDoor, OutputError, ResumeError
from foxhunt.outputs import SHOWN_DIFFERENCES, claim_file, claim_folder, claim_run

RESULTS = ("checkpoints", "folds.json", "train.config.json")


def resume(folder: Path, cfg) -> Path:
    return claim_run(folder, cfg, "train.config.json", RESULTS, resume=True, overwrite=False)


def test_a_resume_names_every_differing_key_with_both_values_and_counts_the_rest(tmp_path: Path) -> None:
    write_resolved(load_config("smoke"), tmp_path / "train.config.json")
    other = load_config("smoke", overrides=["agent.learn.lr=0.01", "agent.network.hidden=8"])
    with pytest.raises(ResumeError) as err:
        resume(tmp_path, other)
    text = str(err.value)
    assert "agent.learn.lr: 0.003 -> 0.01" in text and "agent.network.hidden: " in text and "-> 8" in text
    ten = [
        "run.seed=1",
        "train.epochs=1",
        "train.envs=4",
        "train.steps_per_epoch=8",
        "folds.n_folds=2",
        "agent.learn.lr=0.01",
        "agent.learn.batch=32",
        "agent.replay.capacity=512",
        "agent.network.hidden=8",
        "agent.network.atoms=11",
    ]
    with pytest.raises(ResumeError, match=rf"and {len(ten) - SHOWN_DIFFERENCES} more \(fix"):
        resume(tmp_path, load_config("smoke", overrides=ten))
    # The same config: the resume goes ahead, and nothing in the folder was touched.
    assert resume(tmp_path, load_config("smoke")) == tmp_path


def test_resume_and_overwrite_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="resume=True/overwrite=True: both given") as err:
        claim_run(tmp_path, load_config("smoke"), "train.config.json", RESULTS, resume=True, overwrite=True)
    assert err.value.render(FrontDoor.CLI).startswith("--resume/--overwrite: both given")


def test_a_folder_with_a_result_is_refused_unless_overwrite_and_an_empty_one_is_not(tmp_path: Path) -> None:
    assert claim_folder(tmp_path, RESULTS) == tmp_path  # exists, holds nothing of a run
    (tmp_path / "folds.json").write_text("[]")
    with pytest.raises(OutputError, match=r"already holds a result \(folds\.json\)"):
        claim_folder(tmp_path, RESULTS)
    assert claim_folder(tmp_path, RESULTS, overwrite=True) == tmp_path
    f = tmp_path / "x.dbn.zst"
    f.write_bytes(b"x")
    with pytest.raises(OutputError, match="already exists"):
        claim_file(f)
    assert claim_file(f, overwrite=True) == f and f.read_bytes() == b"x"  # nothing deleted by the claim


def test_stale_temps_are_those_of_dead_writers_and_hidden_folders_are_left_alone(tmp_path: Path) -> None:
    hidden = tmp_path / ".venv"
    hidden.mkdir()
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())  # no process has a larger id
    dead = [tmp_path / f".a.json.{pid_max + 1}.abcdefgh.tmp", tmp_path / ".b.json.qwerty12.tmp"]
    inside_hidden = hidden / f".c.json.{pid_max + 1}.abcdefgh.tmp"
    not_a_temp = tmp_path / "results.tmp"  # no leading dot: not a name atomic_path makes
    for p in (*dead, inside_hidden, not_a_temp):
        p.touch()
    with atomic_path(tmp_path / "d.json") as live:
        assert live.name.startswith(f".d.json.{os.getpid()}.") and not is_stale_temp(live)
        assert sorted(remove_stale_temps(tmp_path)) == sorted(dead)
        assert live.exists() and inside_hidden.exists() and not_a_temp.exists()
        live.write_text("{}")
    assert (tmp_path / "d.json").read_text() == "{}" and not live.exists()


@pytest.mark.parametrize(
    "full",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        # what safetensors' Rust writer raises: its own type, the OS error only in its text
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
    ],
)
def test_a_full_disk_is_a_clear_error_naming_the_folder_and_nothing_is_left(
    full: Exception, tmp_path: Path
) -> None:
    target = tmp_path / "ckpt" / "last.safetensors"

    def write_half() -> None:
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise full

    with pytest.raises(FoxhuntError, match="no space left on the device of .*ckpt.*bytes free") as caught:
        write_half()
    assert caught.value.__cause__ is full and "free space" in caught.value.fix
    assert list(target.parent.iterdir()) == []  # neither the file nor its temporary


def test_other_errors_in_an_atomic_write_pass_through(tmp_path: Path) -> None:
    with pytest.raises(OSError) as caught, atomic_path(tmp_path / "a.json"):
        raise OSError(errno.EACCES, "Permission denied")
    assert caught.value.errno == errno.EACCES and list(tmp_path.iterdir()) == []
