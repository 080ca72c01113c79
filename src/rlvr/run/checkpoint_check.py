"""Is a checkpoint intact? A manifest written at save time, checked before a resume.

``save_checkpoint`` writes ``manifest.json`` (every file's size and CRC-32, ``checkpoints.write_manifest``)
into the temporary folder before the atomic rename. ``checkpoint_problem`` finds what is wrong with a folder: a
missing file, a size or checksum that differs from the manifest (a truncated or overwritten
file), a trainer state that does not parse, weights that are not finite (NaN or inf written by a
failing disk or a bad step); a checkpoint without a manifest was not written whole by rlvr.
``newest_intact`` picks the checkpoint a resume should use.
Cost: one more read of every file at save and at resume (CRC-32, a checksum for damage, not
for tampering: several times faster than SHA-256 on multi-GB optimizer states).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlvr.run.checkpoint_files import (
    LEGACY_RNG_FILE,
    MANIFEST,
    RNG_FILE,
    STATE_FILE,
    TRAINING_FILES,
    crc32,
    weight_files,
)


def checkpoint_problem(folder: Path) -> str | None:
    """What is wrong with the checkpoint in ``folder``, in a few words, or None when it is intact."""
    missing = [name for name in TRAINING_FILES if not (folder / name).is_file()
               and not (name == RNG_FILE and (folder / LEGACY_RNG_FILE).is_file())]  # (rlvr's rng.pt, before)
    weights = weight_files(folder, adapter=False) or weight_files(folder, adapter=True)  # the model (LoRA: adapter)
    if not weights or not all(f.is_file() for f in weights):
        missing.append("the model weights (model.safetensors or adapter_model.safetensors)")
    if missing:
        return f"{', '.join(missing)} missing"
    try:
        files = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, UnicodeDecodeError):
        return f"{MANIFEST} unreadable"
    for name, (size, digest) in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} when saved (truncated or overwritten)"
        if crc32(path) != digest:
            return f"{name} differs from what was saved (checksum)"
    try:
        json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))["step"]
    except (ValueError, KeyError, UnicodeDecodeError):
        return f"{STATE_FILE} unreadable"
    return _weights_problem(weights)


def newest_intact(checkpoints: list[Path]) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest intact checkpoint of ``checkpoints`` (oldest first), and the damaged ones passed over."""
    damaged = []
    for folder in reversed(checkpoints):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, damaged
        damaged.append((folder, problem))
    return None, damaged


def _weights_problem(files: list[Path]) -> str | None:
    from safetensors import SafetensorError, safe_open

    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for key in handle.keys():  # noqa: SIM118  (safe_open has keys(), not __iter__)
                    tensor = handle.get_tensor(key)
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                        return f"{path.name} holds non-finite values in {key}"
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            return f"{path.name} unreadable ({type(exc).__name__})"
    return None
