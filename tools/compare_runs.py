"""Are two run folders the same run? Every JSON file (timings left out) and every checkpoint tensor,
compared exactly: the bit-identical check of a refactor (docs/results/2026-12-07-agent-split.md).

    .venv/bin/python tools/compare_runs.py /tmp/before /tmp/after

Prints each JSON file's verdict, each difference found and a last line with the counts; exits 1
when anything differs. Keys ending ``_s`` or ``_ms`` or naming seconds, a duration or a wall clock
are timings and left out, and with them a checkpoint document's own hash (it covers them); each
folder's own path is replaced by ``<OUT>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

TIMING = ("seconds", "elapsed", "wall", "duration", "created", "started", "finished", "hostname")


def is_timing(key: str) -> bool:
    k = key.lower()
    return k.endswith(("_s", "_ms")) or any(t in k for t in TIMING)


def without_timings(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: without_timings(v) for k, v in x.items() if not is_timing(k)}
    if isinstance(x, list):
        return [without_timings(v) for v in x]
    return x


def differences(x: Any, y: Any, path: str) -> list[str]:
    """Where ``x`` and ``y`` differ (NaN equals NaN)."""
    if isinstance(x, dict) and isinstance(y, dict):
        out = [f"key only in one: {path}/{k}" for k in sorted(set(x) ^ set(y))]
        for k in sorted(set(x) & set(y)):
            out += differences(x[k], y[k], f"{path}/{k}")
        return out
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        pairs = enumerate(zip(x, y, strict=True))
        return [d for i, (p, q) in pairs for d in differences(p, q, f"{path}[{i}]")]
    if x != y and not (x != x and y != y):
        return [f"differs: {path} {x!r:.80} {y!r:.80}"]
    return []


def read(root: Path, rel: Path) -> Any:
    doc = json.loads((root / rel).read_text().replace(str(root), "<OUT>"))
    if isinstance(doc, dict) and isinstance(doc.get("content_hash"), dict):
        # a checkpoint document's own hash covers its meta's timings (the epochs' seconds); its
        # tensors' hashes and every other field are compared
        doc["content_hash"].pop("document", None)
    return without_timings(doc)


def main(a: Path, b: Path) -> int:
    found: list[str] = []
    jsons = sorted(p.relative_to(a) for p in a.rglob("*.json"))
    for rel in jsons:
        if not (b / rel).is_file():
            found.append(f"missing in {b}: {rel}")
            continue
        diff = differences(read(a, rel), read(b, rel), str(rel))
        print(f"{rel}: {'DIFFERS' if diff else 'identical'}")
        found += diff
    checkpoints = sorted(p.relative_to(a) for p in a.rglob("*.safetensors"))
    tensors = 0
    for rel in checkpoints:
        x, y = load_file(a / rel), load_file(b / rel)
        if set(x) != set(y):
            found.append(f"tensor names differ: {rel}")
            continue
        for k in x:
            tensors += 1
            same = x[k].dtype == y[k].dtype and x[k].shape == y[k].shape
            if not (same and torch.equal(torch.nan_to_num(x[k]), torch.nan_to_num(y[k]))):
                found.append(f"tensor differs: {rel} {k}")
    print("\n".join(found))
    counts = f"{len(jsons)} JSON files, {len(checkpoints)} checkpoints, {tensors} tensors"
    print(f"{counts}: {len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="a run folder (foxhunt run --out)")
    parser.add_argument("after", type=Path, help="the run folder to compare with it")
    args = parser.parse_args()
    sys.exit(main(args.before, args.after))
