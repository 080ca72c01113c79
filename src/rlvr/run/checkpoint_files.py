"""Where a run's checkpoints and saved models live, and how folders are made durable.

The layout is transformers'/TRL's, so ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` (and vLLM) load any of these folders as they are::

    <output_dir>/
      config.json, model.safetensors, generation_config.json, tokenizer files   the final model
      README.md        the model card, written at each checkpoint (as TRL's GRPOTrainer writes it)
      checkpoint-20/   the model at step 20, the same files at the top (with training_args.bin), and beside
                       them optimizer.pt, scheduler.pt, rng_state.pth, trainer_state.json (transformers'
                       TrainerState), rlvr_state.json (rlvr's state), manifest.json
      base_model/      LoRA on a model with no folder or Hub id (tiny-random): the frozen base
                       that adapter_config.json's base_model_name_or_path names
      merged/          LoRA with save_merged_model=true: base + adapter merged (also in each checkpoint)

A LoRA run's model files are the adapter (adapter_config.json, adapter_model.safetensors).
No torch here: ``rlvr eval`` uses it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from pathlib import Path

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
MANIFEST = "manifest.json"
STATE_FILE = "rlvr_state.json"  # rlvr's state of the run; trainer_state.json is transformers' TrainerState
RNG_FILE = "rng_state.pth"  # transformers' Trainer._save_rng_state (one process); rlvr's checkpoints before: rng.pt
LEGACY_RNG_FILE = "rng.pt"
TRAINING_FILES = ("optimizer.pt", "scheduler.pt", RNG_FILE, STATE_FILE, "trainer_state.json", MANIFEST)
TRAINING_ARGS = "training_args.bin"  # torch.save of the run's arguments, beside each saved model (transformers')
BASE_MODEL, MERGED = "base_model", "merged"
MODEL_WEIGHTS = "model.safetensors"  # transformers' save_pretrained (one file)
WEIGHTS_INDEX = "model.safetensors.index.json"  # ... or the index of its shards (max_shard_size)
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # PEFT's save_pretrained: a LoRA run's model files are the adapter


def weight_files(folder: Path, *, adapter: bool) -> list[Path]:
    """The model's weight files in a checkpoint (``adapter``: a LoRA run's adapter), as transformers and PEFT name
    them: the index's shards, or the one file. Other ``*.safetensors`` a folder may hold (a user's, a tool's) are not
    the model's and are never loaded. Empty when the folder has none; a shard the index names but the folder lacks
    is listed (its load fails, naming it)."""
    if adapter:
        return [folder / ADAPTER_WEIGHTS] if (folder / ADAPTER_WEIGHTS).is_file() else []
    if (folder / WEIGHTS_INDEX).is_file():
        shards = json.loads((folder / WEIGHTS_INDEX).read_text(encoding="utf-8"))["weight_map"].values()
        return [folder / name for name in sorted(set(shards))]
    return [folder / MODEL_WEIGHTS] if (folder / MODEL_WEIGHTS).is_file() else []


SAVED_SUFFIXES = {".json", ".safetensors", ".pt", ".pth", ".jinja", ".txt", ".model", ".bin", ".md"}  # a save's


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    """``<output_dir>/checkpoint-<step>``: no zero padding, as transformers' ``checkpoint-500``."""
    return output_dir / f"checkpoint-{step}"


def checkpoint_step(folder: Path) -> int | None:
    """The step of a checkpoint folder by its name; None: not a checkpoint name."""
    m = CHECKPOINT.match(folder.name)
    return int(m.group(1)) if m else None


def list_checkpoints(output_dir: Path) -> list[Path]:
    """The checkpoint folders of ``output_dir``, oldest first.

    Only complete folders have these names: a save writes ``.tmp-checkpoint-N`` and renames it.
    """
    found = {checkpoint_step(path): path for path in output_dir.glob("checkpoint-*") if path.is_dir()}
    return [found[step] for step in sorted(step for step in found if step is not None)]


class ForeignFiles(ValueError):
    """A checkpoint folder holds files its save did not write; rlvr does not delete it."""


def foreign_entries(folder: Path) -> list[str]:
    """What ``folder`` (a checkpoint) holds that its save did not write, by its manifest: the top-most such
    paths ("sub/" for a folder), [] when everything in it is rlvr's. A checkpoint whose manifest is gone
    (damaged) is judged by name: files of the kinds a save writes at its top, and ``merged/``."""
    try:
        listed = set(json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError):
        foreign = []
        for p in sorted(folder.iterdir()):
            if p.is_dir() and p.name != MERGED:
                foreign.append(f"{p.name}/")
            elif p.is_file() and (p.suffix not in SAVED_SUFFIXES or p.name.startswith(".")):
                foreign.append(p.name)
        return foreign
    owned_dirs = {str(parent) for name in listed for parent in Path(name).parents if str(parent) != "."}
    foreign: list[str] = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(str(rel).startswith(f) for f in foreign if f.endswith("/")):
            continue  # inside a foreign folder already named
        if path.is_dir() and not path.is_symlink():
            if str(rel) not in owned_dirs:
                foreign.append(f"{rel}/")
        elif str(rel) not in listed and rel != Path(MANIFEST):
            foreign.append(str(rel))
    return foreign


def remove_checkpoint(folder: Path, *, why: str) -> None:
    """Delete a checkpoint folder, unless it holds anything rlvr did not write (another run, a user's file):
    then ForeignFiles names them and nothing is deleted. ``why``: what asked for the deletion."""
    foreign = foreign_entries(folder)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ForeignFiles(f"{why} would delete {folder}, but it holds {shown}, which rlvr did not write; nothing was "
                           f"deleted. Move that out of {folder.name} (or delete the folder yourself), then run the "
                           "same command with resume=true")
    shutil.rmtree(folder, ignore_errors=True)


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` (a file or a folder, recursively) to ``target``; copy where links fail.

    Safe because saved files are never written in place (every save writes new files and renames).
    """
    if source.is_dir():
        target.mkdir()
        for child in source.iterdir():
            link_or_copy(child, target / child.name)
        return
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copy2(source, target)


def fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    for path in [folder, *[p for p in folder.rglob("*") if p.is_dir()]]:
        fsync_dir(path)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(folder: Path) -> None:
    """Record the size and CRC-32 of every file under ``folder`` in ``folder/manifest.json``."""
    files = {str(p.relative_to(folder)): [p.stat().st_size, crc32(p)]
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1), encoding="utf-8")


def crc32(path: Path) -> str:
    value = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            value = zlib.crc32(block, value)
    return f"{value:08x}"
