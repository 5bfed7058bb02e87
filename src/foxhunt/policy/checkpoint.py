"""Checkpoints (docs/design.md §7): an agent's state in one safetensors file, JSON metadata beside
it, and a layout fingerprint that refuses to load into a different network.

A checkpoint named ``P`` is the pair ``P.safetensors`` + ``P.json``:

* ``P.safetensors`` holds every tensor and, in its header, the whole JSON document. The document
  holds two nested sections, each a tree of tables, lists and numbers whose tensors are placeholders
  naming a tensor of the file (:func:`_encode`): ``policy``, what acting reads
  (:meth:`foxhunt.agent.actor.Actor.state_dict`: the network, PopArt and the acting
  signals), and ``training``, what a resumed run continues from (the agent's learner, replay, visit
  counts and generator, and the trainer's own state). A loader gets the two trees back as they were
  given, tensors in place; nothing is found by the spelling of a key. The file is written to a
  temporary name and renamed, so it is the one authority: a checkpoint is either all there or
  absent, never half-written.
* ``P.json`` is the same document, pretty-printed for people and tools (written after the
  safetensors file, also atomically; loading never needs it).

The document's ``meta`` holds the caller's meta (resolved config, fold, epoch, metrics, seed) plus
``foxhunt_version``, ``created`` and ``fingerprint`` (the shapes and dtypes of the policy's
tensors, the state layout and the action branches).

**Integrity.** The document's ``content_hash`` holds the SHA-256 of every tensor (dtype, shape and
bytes) and of the rest of the document itself; every read verifies them, and the policy's tensors
must be finite. A flipped byte, an edited epoch or a NaN weight is one line naming the file, never a
network that acts on other numbers. :func:`checkpoint_config` validates the header's resolved config
and the keys a caller reads (``fold``, ``epoch``) before anything uses them.

:func:`export_weights` writes a **weights-only export** of a training checkpoint in the same format:
the ``policy`` section and the metadata, without the ``training`` section (replay buffer, optimizer
state, random streams: a few hundred kB instead of megabytes). It loads like a checkpoint for acting;
resuming training from it is refused.

:class:`~foxhunt.policy.store.CheckpointStore` lays a run's checkpoints out per fold and
writes them, now or on a writer thread (:mod:`foxhunt.policy.writer`).
:func:`capture_rng` and :func:`restore_rng` put the random streams into tensors so a resumed run
continues them.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from foxhunt import __version__
from foxhunt.agent.ppo import PPO_POLICY_ENTRIES
from foxhunt.atomic import atomic_path, write_text
from foxhunt.domain.actions import BRANCHES, ActionCodec, BranchConfig
from foxhunt.errors import FoxhuntError
from foxhunt.features.layout import STATE_LAYOUT, Layout
from foxhunt.validation.normalise import RobustScaler

FORMAT = "foxhunt-checkpoint"
FORMAT_VERSION = 3
"""The one version this foxhunt reads: the document holds the agent's ``policy`` and ``training``
state as nested trees (module docstring). Version 2 stored named modules, optimizers and flat extra
tensors; version 1 had no content hash. Both are refused with the fix."""
POLICY, TRAINING = "policy", "training"
"""The document's two state sections (module docstring)."""
REQUIRED_META = ("fold", "epoch")
"""The keys of a checkpoint's meta that its readers use (besides the optional resolved ``config``)."""
_HEADER_KEY = "foxhunt"  # safetensors header metadata key holding the JSON document


class CheckpointError(FoxhuntError):
    """A checkpoint file is missing, truncated, corrupt or not a foxhunt checkpoint."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint was written for a different network, state layout or action codec.

    ``differences`` lists each one (the message joins them)."""

    def __init__(self, where: str | Path, differences: list[str]) -> None:
        self.differences = list(differences)
        super().__init__(
            where,
            f"the checkpoint does not fit this network ({len(differences)} difference"
            f"{'s' if len(differences) != 1 else ''}: {'; '.join(differences)})",
            "load it with the configuration it was trained with (its .json holds the resolved config), "
            "or train from scratch",
        )


# --- fingerprint --------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _state_spec(state: Mapping[str, Tensor]) -> dict[str, dict[str, Any]]:
    """Shape and dtype of every tensor of a state dict (tied tensors under each of their names)."""
    return {name: {"shape": list(t.shape), "dtype": _dtype_name(t.dtype)} for name, t in state.items()}


def _branch_sizes(branches: BranchConfig | ActionCodec) -> dict[str, int]:
    codec = branches if isinstance(branches, ActionCodec) else ActionCodec(branches)
    return dict(zip(BRANCHES, codec.sizes, strict=True))


@dataclass(frozen=True)
class Fingerprint:
    """What a checkpoint must match to be loaded: the names, shapes and dtypes of its policy's
    tensors, the state layout's groups and the action branches' sizes."""

    modules: dict[str, dict[str, dict[str, Any]]]  # policy entry -> tensor name -> shape, dtype
    layout: list[dict[str, Any]]  # Layout.describe()
    layout_align: int
    branches: dict[str, int]  # branch name -> size

    @classmethod
    def of(
        cls,
        policy: Mapping[str, Mapping[str, Tensor]],
        branches: BranchConfig | ActionCodec,
        layout: Layout = STATE_LAYOUT,
    ) -> Fingerprint:
        """The fingerprint of ``policy`` (entry -> state dict, as
        :meth:`~foxhunt.agent.actor.Actor.state_dict` gives it) under ``branches``, ``layout``."""
        return cls(
            modules={name: _state_spec(state) for name, state in policy.items()},
            layout=layout.describe(),
            layout_align=layout.align,
            branches=_branch_sizes(branches),
        )

    def _body(self) -> dict[str, Any]:
        return {
            "modules": self.modules,
            "layout": {"align": self.layout_align, "groups": self.layout},
            "branches": self.branches,
        }

    @property
    def digest(self) -> str:
        """Short SHA-256 of the canonical JSON body."""
        text = json.dumps(self._body(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"hash": self.digest, **self._body()}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Fingerprint:
        return cls(
            modules=body["modules"],
            layout=body["layout"]["groups"],
            layout_align=int(body["layout"]["align"]),
            branches=body["branches"],
        )

    def diff(self, other: Fingerprint, here: str = "here", there: str = "in the checkpoint") -> list[str]:
        """Human-readable differences, ``self`` being ``here`` and ``other`` ``there``; empty when
        the two match."""
        mine_algo, their_algo = _algo(self.modules), _algo(other.modules)
        if mine_algo != their_algo:  # one line, not a list of every tensor the other learner lacks
            return [f"made by agent.algo = {their_algo}, this agent is agent.algo = {mine_algo}"]
        out: list[str] = []
        for name in _union(self.modules, other.modules):
            mine, theirs = self.modules.get(name), other.modules.get(name)
            if mine is None or theirs is None:
                out.append(f"module {name}: only {there if mine is None else here}")
                continue
            for t in _union(mine, theirs):
                a, b = mine.get(t), theirs.get(t)
                key = f"{name}.{t}"
                if a is None or b is None:
                    which = b if a is None else a
                    out.append(f"{key}: {_show(which)} only {here if b is None else there}")
                    continue
                out.extend(
                    f"{key}: {attr} {a[attr]} {here}, {b[attr]} {there}"
                    for attr in ("shape", "dtype")
                    if a[attr] != b[attr]
                )
        out.extend(_layout_diff(self, other, here, there))
        for name in _union(self.branches, other.branches):
            a, b = self.branches.get(name, "absent"), other.branches.get(name, "absent")
            if a != b:
                out.append(f"branch {name}: {a} {here}, {b} {there}")
        return out


def _algo(modules: Mapping[str, Any]) -> str:
    """The learner whose policy holds ``modules`` (its entries: a PPO policy's actor-critic, else DQN's)."""
    return "ppo" if PPO_POLICY_ENTRIES[0] in modules else "dqn"


def _union(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return list(a) + [k for k in b if k not in a]


def _show(spec: Mapping[str, Any]) -> str:
    return f"{spec['shape']} {spec['dtype']}"


def _layout_diff(a: Fingerprint, b: Fingerprint, here: str, there: str) -> list[str]:
    out: list[str] = []
    if a.layout_align != b.layout_align:
        out.append(f"state layout alignment: {a.layout_align} {here}, {b.layout_align} {there}")
    ga, gb = {g["name"]: g for g in a.layout}, {g["name"]: g for g in b.layout}
    if [n for n in ga if n in gb] != [n for n in gb if n in ga]:
        out.append(f"state layout group order: {list(ga)} {here}, {list(gb)} {there}")
    width_changed = False
    for name in _union(ga, gb):
        x, y = ga.get(name), gb.get(name)
        if x is None or y is None:
            out.append(f"state layout group {name}: only {here if y is None else there}")
            width_changed = True
            continue
        if x["width"] != y["width"]:
            out.append(f"state layout group {name}: width {x['width']} {here}, {y['width']} {there}")
            width_changed = True
        elif x["slots"] != y["slots"]:
            only_x = [s for s in x["slots"] if s not in y["slots"]]
            only_y = [s for s in y["slots"] if s not in x["slots"]]
            detail = f"{here} only {only_x}, {there} only {only_y}" if only_x or only_y else "order differs"
            out.append(f"state layout group {name}: slots differ ({detail})")
        if not width_changed and (x["offset"], x["padded"]) != (y["offset"], y["padded"]):
            out.append(
                f"state layout group {name}: offset/padded {x['offset']}/{x['padded']} {here}, "
                f"{y['offset']}/{y['padded']} {there}"
            )
    return out


# --- lossless JSON for optimizer state and RNG states ------------------------------------------


def _view(t: Tensor) -> tuple:
    """What makes two tensors one: the same memory read the same way (``state_dict`` hands out a new
    tensor object for the same parameter at each call)."""
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape), t.stride())


def _encode(
    value: Any, key: str, tensors: dict[str, Tensor] | None, views: dict[tuple, str] | None = None
) -> Any:
    """JSON-able form of ``value``; tensors go to ``tensors[key/...]`` and leave a placeholder. A
    tensor met again (the learner's state repeats the policy's network and PopArt) is stored once,
    both places naming its first key."""
    if views is None:
        views = {}
    if isinstance(value, Tensor):
        if tensors is None:
            raise TypeError(f"{key}: unexpected tensor")
        if value.numel() and _view(value) in views:
            return {"__tensor__": views[_view(value)]}
        if key in tensors:  # two paths spelled alike ({"a/b": x} and {"a": {"b": y}}) would share one
            raise ValueError(f"{key}: two tensors of the state have this path")
        tensors[key] = value
        if value.numel():
            views[_view(value)] = key
        return {"__tensor__": key}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{key}/{i}", tensors, views) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}/{i}", tensors, views) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, f"{key}/{k}", tensors, views) for k, v in value.items()}
        return {
            "__items__": [
                [_encode(k, f"{key}/key", None), _encode(v, f"{key}/{k}", tensors, views)]
                for k, v in value.items()
            ]
        }
    raise TypeError(f"{key}: cannot store a {type(value).__name__} in checkpoint metadata")


def _tensor_keys(value: Any) -> list[str]:
    """The file keys of the tensors an encoded tree refers to, in order."""
    if isinstance(value, list):
        return [k for v in value for k in _tensor_keys(v)]
    if not isinstance(value, dict):
        return []
    if "__tensor__" in value:
        return [value["__tensor__"]]
    return [k for v in value.values() for k in _tensor_keys(v)]


def _decode(value: Any, tensors: Mapping[str, Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=value["dtype"])
    if "__tuple__" in value:
        return tuple(_decode(v, tensors) for v in value["__tuple__"])
    if "__items__" in value:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value["__items__"]}
    return {k: _decode(v, tensors) for k, v in value.items()}


def _json_default(obj: Any) -> Any:
    """Plain JSON for the caller's meta: paths, enums, pydantic models, dataclasses, numpy values."""
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Enum):
        return obj.value
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, np.generic | np.ndarray):
        return obj.tolist()
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    if isinstance(obj, torch.dtype | torch.device):
        return str(obj)
    raise TypeError(
        f"checkpoint meta cannot hold a {type(obj).__name__} (pass tensors through tensors=, "
        f"other values as JSON types)"
    )


# --- save / load --------------------------------------------------------------------------------


def checkpoint_files(path: str | Path) -> tuple[Path, Path]:
    """``(P.safetensors, P.json)`` of a checkpoint named ``P`` (either file's path also names it)."""
    p = Path(path)
    if p.suffix in (".safetensors", ".json"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".safetensors"), p.with_name(p.name + ".json")


def existing_checkpoints(path: str | Path, limit: int = 12) -> list[Path]:
    """The checkpoints (``*.safetensors``) beside ``path`` and in the folders around it: its own
    folder, else the nearest parent that exists, and that folder's subfolders two deep (a run's
    ``checkpoints/fold<k>/``); at most ``limit``, sorted. What a missing checkpoint's error lists."""
    folder = Path(path).parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    found = sorted({p for depth in ("", "*/", "*/*/") for p in folder.glob(depth + "*.safetensors")})
    return found[:limit]


def _missing(path: Path, what: str) -> str:
    """A missing checkpoint's fix: the checkpoints that do exist near it, or where they come from."""
    near = existing_checkpoints(path)
    if near:
        return f"{what}; the checkpoints there: " + ", ".join(str(p) for p in near)
    return f"{what}; no checkpoint near it (foxhunt train writes RUN/checkpoints/fold<k>/last and best)"


def reported_checkpoint(run_dir: str | Path, fold: int) -> Path:
    """The checkpoint a training run reports for ``fold`` (its ``folds.json``'s ``checkpoint_file``:
    ``best`` where an epoch was selected, ``last`` under ``train.selection = last``); without a
    ``folds.json`` (a run still training), ``best`` where it exists, else ``last``."""
    run = Path(run_dir)
    summary = run / "folds.json"
    if summary.is_file():
        folds = json.loads(summary.read_text())
        if not 0 <= fold < len(folds):
            raise CheckpointError(summary, f"has folds 0..{len(folds) - 1}, not {fold}", "pick one of them")
        return run / folds[fold]["checkpoint_file"]
    best = checkpoint_files(run / "checkpoints" / f"fold{fold}" / "best")[0]
    # Loading a missing one fails naming the checkpoints there (_read_document).
    return best if best.is_file() else checkpoint_files(best.with_name("last"))[0]


def _flat_for_disk(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Detached, CPU, contiguous tensors; a tensor whose storage another one already uses is
    cloned (safetensors refuses shared memory)."""
    out: dict[str, Tensor] = {}
    seen: set[int] = set()
    for key, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if t.numel() and ptr in seen:
            t = t.clone()
            ptr = t.untyped_storage().data_ptr()
        if t.numel():
            seen.add(ptr)
        out[key] = t
    return out


def save_checkpoint(
    path: str | Path,
    *,
    policy: Mapping[str, Mapping[str, Tensor]],
    branches: BranchConfig | ActionCodec,
    training: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    layout: Layout = STATE_LAYOUT,
) -> Path:
    """Write checkpoint ``path`` (``path.safetensors`` + ``path.json``) atomically; return the
    safetensors path.

    ``policy`` is what acting loads (entry -> state dict: fingerprinted and checked finite on every
    read); ``training`` what a resumed run continues from (any tree of tables, lists, JSON values and
    tensors: the learner, replay, counts, :func:`capture_rng` output), None for a policy alone;
    ``meta`` the resolved config, fold, epoch, metrics, seed. ``foxhunt_version``, ``created`` and
    ``fingerprint`` are added (replacing any the caller passed).
    """
    flat: dict[str, Tensor] = {}
    doc: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "meta": {
            **(meta or {}),
            "foxhunt_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "fingerprint": Fingerprint.of(policy, branches, layout).to_json(),
        },
    }
    views: dict[tuple, str] = {}  # one table for both sections: a tensor in both is stored once
    doc[POLICY] = _encode(policy, POLICY, flat, views)
    if training is not None:
        doc[TRAINING] = _encode(training, TRAINING, flat, views)
    return _write(checkpoint_files(path)[0], flat, doc)


def tensor_hash(t: Tensor) -> str:
    """SHA-256 of a (CPU) tensor's dtype, shape and bytes."""
    h = hashlib.sha256(f"{_dtype_name(t.dtype)}|{list(t.shape)}|".encode())
    h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def _document_hash(doc: Mapping[str, Any]) -> str:
    """SHA-256 of the document without its ``content_hash`` (canonical JSON, as read back)."""
    body = {k: v for k, v in doc.items() if k != "content_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _fsync(path: Path) -> None:
    """Force ``path`` (a file or a folder's entries) to disk: a rename is only as durable as this."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(weights_path: Path, flat: Mapping[str, Tensor], doc: Mapping[str, Any]) -> Path:
    """The safetensors file (tensors + the document in its header), then the JSON beside it.

    Written new, fsynced, then renamed over the old file (the old one stays whole until the new one
    is complete), and the folder fsynced so the rename itself survives a crash of the machine.
    """
    on_disk = _flat_for_disk(flat)
    body = json.loads(json.dumps(doc, default=_json_default))  # the document exactly as a reader sees it
    body["content_hash"] = {
        "tensors": {key: tensor_hash(t) for key, t in on_disk.items()},
        "document": _document_hash(body),
    }
    header = json.dumps(body)
    with atomic_path(weights_path) as tmp:
        save_file(on_disk, str(tmp), metadata={_HEADER_KEY: header})
        _fsync(tmp)
    _fsync(weights_path.parent)
    write_text(checkpoint_files(weights_path)[1], json.dumps(body, indent=2) + "\n")
    return weights_path


def copy_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Checkpoint ``dst`` as a byte copy of checkpoint ``src`` (both files), written as :func:`_write`
    writes (new, fsynced, renamed over the old, the folder fsynced); return its safetensors path.

    The same state under a second name without serialising and hashing it again: with the replay
    buffer inside, a checkpoint is up to 1-2 GB at GPU sizes, and the hashes alone take seconds. A
    copy, not a hard link: a damaged ``last`` leaves the ring entry whole, and a resume falls back
    to it (:meth:`CheckpointStore.resume_point`)."""
    src_w, src_j = checkpoint_files(src)
    dst_w, dst_j = checkpoint_files(dst)
    with atomic_path(dst_w) as tmp:
        shutil.copyfile(src_w, tmp)
        _fsync(tmp)
    _fsync(dst_w.parent)
    write_text(dst_j, src_j.read_text())
    return dst_w


def _verify_tensors(weights_path: Path, doc: Mapping[str, Any], flat: Mapping[str, Tensor]) -> None:
    """Refuse tensors whose hash is not the recorded one, and module weights that are not finite."""
    recorded = doc["content_hash"]["tensors"]
    unknown = [key for key in flat if key not in recorded]
    bad = unknown + [key for key in flat if key in recorded and tensor_hash(flat[key]) != recorded[key]]
    if bad:
        raise CheckpointError(
            weights_path,
            f"corrupt checkpoint: the content hash of tensor {bad[0]}"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
            + " does not match",
            "use another checkpoint (the ring keeps earlier ones) or retrain",
        )
    policy = set(_tensor_keys(doc[POLICY]))
    for key, t in flat.items():
        if key in policy and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(
                weights_path,
                f"non-finite weights (NaN or Inf) in {key}",
                "use an earlier checkpoint (the ring keeps them) or retrain with a lower learning rate",
            )


def _read_tensors(
    weights_path: Path, doc: Mapping[str, Any], device: str, keys: set[str] | None = None
) -> dict[str, Tensor]:
    """The checkpoint's tensors (those of ``keys``, all of which must be there; None: every one),
    verified."""
    try:
        with safe_open(str(weights_path), framework="pt", device=device) as f:
            flat = {key: f.get_tensor(key) for key in f.keys() if keys is None or key in keys}
    except (SafetensorError, OSError, RuntimeError) as e:
        raise CheckpointError(
            weights_path,
            f"cannot read its tensors ({e})",
            "use another checkpoint (the ring keeps earlier ones) or retrain",
        ) from e
    absent = sorted((keys or set()) - set(flat))
    if absent:
        raise CheckpointError(
            weights_path,
            f"corrupt checkpoint: tensor {absent[0]} of its document is not in the file",
            "use another checkpoint (the ring keeps earlier ones) or retrain",
        )
    _verify_tensors(weights_path, doc, flat)
    return flat


def _read_document(weights_path: Path) -> dict[str, Any]:
    if not weights_path.is_file():
        raise CheckpointError(
            weights_path,
            "no such checkpoint file",
            _missing(weights_path, "check the path (a checkpoint P is the pair P.safetensors + P.json)"),
        )
    try:
        with safe_open(str(weights_path), framework="pt") as f:
            header = f.metadata() or {}
        doc = json.loads(header[_HEADER_KEY])
    except (SafetensorError, OSError, KeyError, ValueError) as e:
        raise CheckpointError(
            weights_path,
            f"is truncated, corrupt or not a foxhunt checkpoint ({e})",
            "use another checkpoint (the ring keeps earlier ones) or retrain",
        ) from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(
            weights_path,
            f"is not a {FORMAT!r} file",
            "use a checkpoint foxhunt train wrote (RUN/checkpoints/fold<k>/last.safetensors or best)",
        )
    if doc.get("format_version") != FORMAT_VERSION:
        meta = doc.get("meta")
        wrote = meta.get("foxhunt_version") if isinstance(meta, dict) else None
        raise CheckpointError(
            weights_path,
            f"is a version {doc.get('format_version')} checkpoint"
            + (f" (written by foxhunt {wrote})" if wrote else "")
            + f"; this foxhunt {__version__} reads version {FORMAT_VERSION} only",
            "retrain, or load it with the foxhunt release that wrote it",
        )
    recorded = doc.get("content_hash")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("tensors"), dict):
        raise CheckpointError(
            weights_path, "corrupt checkpoint: its header lacks the content hash", "use another checkpoint"
        )
    missing = [k for k in ("meta", POLICY) if k not in doc]
    if recorded.get("document") != _document_hash(doc) or missing:
        raise CheckpointError(
            weights_path,
            "corrupt checkpoint: its header does not match its content hash (edited or damaged)",
            "use another checkpoint (the ring keeps earlier ones) or retrain",
        )
    return doc


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read every tensor of checkpoint ``path`` and check it (content hashes, finite weights);
    return its meta. Raises :class:`CheckpointError` naming the file."""
    weights_path = checkpoint_files(path)[0]
    doc = _read_document(weights_path)
    _read_tensors(weights_path, doc, "cpu")
    meta = doc["meta"]
    if not isinstance(meta, dict):
        raise CheckpointError(weights_path, "corrupt checkpoint: its header meta is not a table", "retrain")
    return meta


def checkpoint_config(path: str | Path, fallback: Any) -> tuple[Any, dict[str, Any]]:
    """``(resolved config, meta)`` of checkpoint ``path``, everything checked before use: the
    tensors (:func:`verify_checkpoint`), the keys readers need (:data:`REQUIRED_META`) and the
    header's config validated like a profile. ``fallback`` is used when the header holds no config
    (a checkpoint saved outside ``foxhunt train``).

    The header is the record of the whole run that trained the checkpoint (every section, as
    ``train.config.json``), so what comes back is that run's config, validated by the config layer's
    own loader; this package reads only its ``agent`` and ``env`` sections and compares the market
    sections (:class:`foxhunt.policy.trained.RunRecord`), and never builds or imports the root config
    itself (the import rules in pyproject.toml hold it to that)."""
    from foxhunt.config.loader import validate_tree

    weights_path = checkpoint_files(path)[0]
    meta = verify_checkpoint(weights_path)
    lacking = [k for k in REQUIRED_META if not isinstance(meta.get(k), int) or isinstance(meta.get(k), bool)]
    if lacking:
        raise CheckpointError(
            weights_path,
            f"its header lacks an integer {', '.join(lacking)}, so it is not a training checkpoint",
            "use a checkpoint foxhunt train wrote (RUN/checkpoints/fold<k>/last.safetensors or best)",
        )
    if "config" not in meta:
        return fallback, meta
    if not isinstance(meta["config"], dict):
        raise CheckpointError(weights_path, "its header config is not a table", "use another checkpoint")
    try:
        cfg = validate_tree(meta["config"], "header config")
    except FoxhuntError as e:
        raise CheckpointError(
            weights_path,
            f"its header config is invalid ({e.where}: {e.problem})",
            "use a checkpoint this foxhunt's train wrote, or retrain",
        ) from e
    assert cfg is not None  # cross checks on: an invalid tree raised
    return cfg, meta


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta`` of a checkpoint (caller's meta plus version, created time, fingerprint), read
    from the safetensors header only."""
    return _read_document(checkpoint_files(path)[0])["meta"]


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What :func:`load_checkpoint` read: the meta and the two state sections, tensors in place."""

    meta: dict[str, Any]
    policy: dict[str, dict[str, Tensor]]
    training: dict[str, Any] | None  # None: not read (acting), or a weights-only export


def load_checkpoint(
    path: str | Path,
    *,
    expect: Fingerprint,
    training: bool = False,
    map_location: str | torch.device = "cpu",
) -> LoadedCheckpoint:
    """Read checkpoint ``path``: its meta, its ``policy`` section and (``training``) its ``training``
    section, tensors on ``map_location``.

    Raises :class:`CheckpointMismatchError` listing every difference when the stored fingerprint
    differs from ``expect`` (the loading agent's: ``Fingerprint.of(agent.policy.state_dict(), ...)``),
    :class:`CheckpointError` when ``training`` is asked of a weights-only export, and naming the file
    when it is missing or corrupt. Acting reads only the policy's tensors, never the replay buffer.
    """
    weights_path, _ = checkpoint_files(path)
    doc = _read_document(weights_path)
    differences = expect.diff(Fingerprint.from_json(doc["meta"]["fingerprint"]))
    if differences:
        raise CheckpointMismatchError(weights_path, differences)
    if training and TRAINING not in doc:
        raise CheckpointError(
            weights_path,
            "is a weights-only export (no optimizer or replay state), which acts but cannot resume training",
            "resume from the full checkpoint it was exported from",
        )
    keys = set(_tensor_keys(doc[POLICY]) + (_tensor_keys(doc[TRAINING]) if training else []))
    flat = _read_tensors(weights_path, doc, str(map_location), keys)
    return LoadedCheckpoint(
        meta=doc["meta"],
        policy=_decode(doc[POLICY], flat),
        training=_decode(doc[TRAINING], flat) if training else None,
    )


# --- weights-only export ------------------------------------------------------------------------


def export_weights(
    path: str | Path,
    out: str | Path,
    *,
    scaler: RobustScaler | None = None,
    instrument: dict[str, Any] | None = None,
) -> Path:
    """Write the weights-only export of training checkpoint ``path`` as ``out`` (``out.safetensors``
    + ``out.json``); return the safetensors path.

    The export keeps what acting needs: the ``policy`` section (the network, PopArt, whose statistics
    turn the network's normalised Q values into dollars, and the running signals that scale the
    conviction and Q-variance sizing inputs; a PPO checkpoint's actor-critic and signals) and the whole
    metadata (resolved config, fold, epoch, metrics, layout fingerprint); it drops the ``training``
    section (replay buffer, optimizer state, target network, visit counts, random streams). ``scaler``,
    the fold's training-row normaliser, is stored in the metadata as ``normaliser`` when given, so the
    file alone turns raw feature rows into the states the network was trained on. ``instrument``, the
    contract the training data was of (``Instrument.to_dict``), is stored as ``instrument`` when given:
    ``foxhunt serve`` refuses a stream of another one. The export loads wherever the checkpoint does
    (:func:`load_checkpoint`, ``foxhunt backtest --checkpoint``) and gives the same actions; resuming
    training from it is refused.

    Example::

        export_weights("runs/main/train/checkpoints/fold0/best.safetensors", "exports/fold0")
    """
    from foxhunt.agent.actor import POLICY_ENTRIES

    source = checkpoint_files(path)[0]
    doc = _read_document(source)
    entries = PPO_POLICY_ENTRIES if _algo(doc[POLICY]) == "ppo" else POLICY_ENTRIES  # the learner's own
    lacking = [m for m in entries if m not in doc[POLICY]]
    if lacking:
        raise CheckpointError(
            source,
            f"holds no {', '.join(lacking)} policy state, so it is not a trained agent's checkpoint",
            "export a checkpoint that foxhunt train wrote (RUN/checkpoints/fold<k>/last.safetensors or best)",
        )
    flat = _read_tensors(source, doc, "cpu", set(_tensor_keys(doc[POLICY])))
    meta = {**doc["meta"], "export": {"source": str(source), "weights_only": True}}
    if scaler is not None:
        meta["normaliser"] = scaler.to_dict()
    if instrument is not None:
        meta["instrument"] = instrument
    export = {"format": FORMAT, "format_version": FORMAT_VERSION, "meta": meta, POLICY: doc[POLICY]}
    return _write(checkpoint_files(out)[0], flat, export)


# --- random streams -----------------------------------------------------------------------------


def _to_bytes_tensor(state: Any) -> Tensor:
    raw = json.dumps(_encode(state, "rng", None)).encode()
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def _from_bytes_tensor(t: Tensor) -> Any:
    return _decode(json.loads(t.cpu().numpy().tobytes().decode()), {})


def capture_rng(
    generators: Mapping[str, torch.Generator | np.random.Generator] | None = None,
) -> dict[str, Tensor]:
    """The global torch (CPU and, when initialised, every CUDA device), numpy and Python random
    states, plus those of the named ``generators``, as uint8 tensors keyed ``rng/...`` (put them in
    the ``training`` section of :func:`save_checkpoint`)."""
    out: dict[str, Tensor] = {
        "rng/torch": torch.get_rng_state(),
        "rng/numpy": _to_bytes_tensor(np.random.get_state(legacy=False)),
        "rng/python": _to_bytes_tensor(random.getstate()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng/cuda{i}"] = state
    for name, g in (generators or {}).items():
        if isinstance(g, torch.Generator):
            out[f"rng/gen/{name}"] = g.get_state()
        else:
            out[f"rng/gen/{name}"] = _to_bytes_tensor(g.bit_generator.state)
    return out


def restore_rng(
    states: Mapping[str, Tensor],
    generators: Mapping[str, torch.Generator | np.random.Generator] | None = None,
) -> None:
    """Put back what :func:`capture_rng` captured (CUDA states for the devices present)."""
    torch.set_rng_state(states["rng/torch"].cpu())
    np.random.set_state(_from_bytes_tensor(states["rng/numpy"]))
    random.setstate(_from_bytes_tensor(states["rng/python"]))
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            if f"rng/cuda{i}" in states:
                torch.cuda.set_rng_state(states[f"rng/cuda{i}"].cpu(), i)
    for name, g in (generators or {}).items():
        key = f"rng/gen/{name}"
        if key not in states:
            raise CheckpointError(
                key,
                f"no saved state for the random generator {name!r}",
                "capture it with capture_rng(generators={...}) before saving",
            )
        if isinstance(g, torch.Generator):
            g.set_state(states[key].cpu())
        else:
            g.bit_generator.state = _from_bytes_tensor(states[key])


@dataclass
class CheckpointContents:
    """What one checkpoint holds (see :func:`save_checkpoint` for each field)."""

    policy: Mapping[str, Mapping[str, Tensor]]
    branches: BranchConfig | ActionCodec
    training: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    layout: Layout = STATE_LAYOUT
