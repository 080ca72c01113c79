"""Checkpoints: written atomically, found again on resume.

Layout (``checkpoint_files.py``), as transformers'/TRL's: ``<output_dir>/checkpoint-10/`` holds the
model in Hugging Face format at its top (safetensors, config.json, generation_config.json, the
tokenizer, ``training_args.bin``; a LoRA run: the adapter), loadable as it is by
``AutoModelForCausalLM.from_pretrained``, and beside it what transformers' ``Trainer._save_checkpoint`` writes:
``optimizer.pt`` (in transformers' parameter groups, ``optimizer_layout.py``), ``scheduler.pt``,
``rng_state.pth`` (``Trainer._save_rng_state``'s dict) and ``trainer_state.json``, a transformers
``TrainerState`` (``TrainerState.load_from_json`` reads it): ``global_step`` in optimiser steps and
``log_history``, the metrics.jsonl lines up to the step with TRL's metric names among rlvr's; and rlvr's own
``rlvr_state.json`` (step, data position, counters) and ``manifest.json``. So transformers' Trainer (TRL)
resumes an rlvr checkpoint. ``checkpoint_check.py`` checks a checkpoint is whole before a resume uses it; the
final model at ``output_dir`` itself is ``export.py``'s.

Atomicity: everything is written into ``.tmp-checkpoint-10``, each file fsynced, then the folder is
renamed (atomic on POSIX) and the parent fsynced. A folder named ``checkpoint-*`` is therefore
always complete; a crash leaves at most a ``.tmp-*`` folder, which is deleted on the next save.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.run.checkpoint_files import (
    ADAPTER_WEIGHTS,
    BASE_MODEL,
    LEGACY_RNG_FILE,
    MODEL_WEIGHTS,
    RNG_FILE,
    STATE_FILE,
    WEIGHTS_INDEX,
    checkpoint_dir,
    checkpoint_step,
    fsync_dir,
    fsync_tree,
    list_checkpoints,
    remove_checkpoint,
    weight_files,
    write_manifest,
)
from rlvr.run.export import remove_final_model, save_training_args, write_model
from rlvr.run.optimizer_layout import (
    decay_split,
    schedule_to_rlvr,
    schedule_to_transformers,
    to_rlvr_layout,
    to_transformers_layout,
)
from rlvr.run.write_errors import write_failure

logger = logging.getLogger(__name__)


def rng_state() -> dict[str, Any]:
    """The random states as transformers' ``Trainer._save_rng_state`` writes them to rng_state.pth (one process):
    python, numpy, cpu, and cuda's where there is one."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.random.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s states (also rlvr's older rng.pt: python and ``torch``)."""
    import numpy as np

    random.setstate(_to_tuple(state["python"]))
    torch.set_rng_state(state["cpu"] if "cpu" in state else state["torch"])
    if "numpy" in state:
        np.random.set_state(tuple(state["numpy"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.random.set_rng_state(state["cuda"])


def load_rng_state(path: Path) -> dict[str, Any]:
    """A checkpoint's RNG states: rng_state.pth (numpy's arrays allowed, as transformers loads it; no other
    unpickling), or rlvr's older rng.pt."""
    from transformers.trainer_pt_utils import safe_globals

    if not (path / RNG_FILE).is_file():
        return torch.load(path / LEGACY_RNG_FILE, weights_only=True)
    with safe_globals():
        return torch.load(path / RNG_FILE, weights_only=True)


@dataclass
class Snapshot:
    """What a checkpoint holds: the model and tokenizer, the optimiser and its schedule, and the run's states.

    ``model_state``/``optimizer_state``: full state dicts gathered from a sharded (FSDP2) model; the
    optimiser's is then keyed by parameter name (``trainer_state["optimizer_format"] = "fqn"``).
    ``trainer_state``: rlvr's state (``rlvr_state.json``); ``hf_state``: transformers' TrainerState as a
    dict (``trainer_state.json``; :func:`hf_trainer_state`); ``training_args``: training_args.bin's object.
    """

    model: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    trainer_state: dict[str, Any]
    hf_state: dict[str, Any] | None = None
    model_state: dict[str, torch.Tensor] | None = None
    optimizer_state: dict[str, Any] | None = None
    training_args: Any = None
    extra: Any = None  # fn(folder): writes more of the run's state into the checkpoint (before its manifest)


def save_checkpoint(output_dir: Path, step: int, snapshot: Snapshot, *, keep_last: int | None,
                    merged_model: bool = False) -> Path:
    """Write a complete checkpoint of ``snapshot`` for ``step`` atomically and prune old ones (``keep_last``:
    save_total_limit). ``merged_model``: LoRA's ``save_merged_model``, the merged full model in ``merged/``."""
    root = output_dir
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # a save that crashed: .tmp-checkpoint-N, .tmp-base_model, .tmp-final-model
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoint_dir(output_dir, step)
    tmp = root / f".tmp-{final.name}"
    try:
        tmp.mkdir()
        _write_snapshot(tmp, step, snapshot, output_dir=output_dir, merged_model=merged_model)
        if snapshot.extra is not None:
            snapshot.extra(tmp)
        write_manifest(tmp)  # sizes and checksums: a resume can tell a damaged checkpoint (checkpoint_check.py)
        fsync_tree(tmp)
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it whole
            remove_checkpoint(final, why=f"saving step {step} again")
        os.replace(tmp, final)
    except BaseException as error:
        failure = write_failure(error, what=f"checkpoint {final.name}", folder=root, removed=tmp.name, keep=keep_last,
                                earlier=any(old != final for old in list_checkpoints(output_dir)))
        shutil.rmtree(tmp, ignore_errors=True)  # a partial checkpoint must not stay behind filling the disk
        if failure is not None:  # a full disk, a quota, a file-size limit, a failing disk: one line (write_errors.py)
            raise failure from error
        raise
    fsync_dir(root)
    if keep_last is not None:  # save_total_limit
        for old in list_checkpoints(output_dir)[:-keep_last]:
            remove_checkpoint(old, why=f"save_total_limit={keep_last}")
    return final


def _write_snapshot(folder: Path, step: int, snapshot: Snapshot, *, output_dir: Path, merged_model: bool) -> None:
    """The checkpoint's files in ``folder``: the model (Hugging Face format), optimiser, schedule, RNG, states."""
    write_model(folder, model=snapshot.model, tokenizer=snapshot.tokenizer, output_dir=output_dir,
                model_state=snapshot.model_state, merged=merged_model)
    save_training_args(folder, snapshot.training_args)
    sharded = snapshot.optimizer_state is not None
    optimizer_state = snapshot.optimizer_state if sharded else to_transformers_layout(
        snapshot.optimizer.state_dict(), *decay_split(snapshot.model))
    torch.save(optimizer_state, folder / "optimizer.pt")
    trainer_state = {**snapshot.trainer_state, "optimizer_format": "fqn"} if sharded else snapshot.trainer_state
    schedule = snapshot.scheduler.state_dict()
    torch.save(schedule if sharded else schedule_to_transformers(schedule), folder / "scheduler.pt")
    torch.save(rng_state(), folder / RNG_FILE)
    (folder / STATE_FILE).write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
    (folder / "trainer_state.json").write_text(json.dumps(snapshot.hf_state or hf_trainer_state(step), indent=2,
                                                          sort_keys=True) + "\n", encoding="utf-8")


def remove_checkpoints(output_dir: Path) -> None:
    """Delete every checkpoint of ``output_dir``, its final model and LoRA's base_model/
    (``overwrite_output_dir=true``: the run starts over)."""
    for folder in list_checkpoints(output_dir):
        remove_checkpoint(folder, why="overwrite_output_dir=true")
    shutil.rmtree(output_dir / BASE_MODEL, ignore_errors=True)
    remove_final_model(output_dir)


def remove_checkpoints_after(output_dir: Path, step: int) -> None:
    """Resuming from an earlier checkpoint (``resume_from_checkpoint``) abandons the later steps: their
    checkpoints and the final model go, as their lines of metrics.jsonl do, so that ``resume=true``
    never picks them up again."""
    later = [folder for folder in list_checkpoints(output_dir) if checkpoint_step(folder) > step]
    for folder in later:
        remove_checkpoint(folder, why=f"resuming from step {step}")
    if later:
        remove_final_model(output_dir)
        logger.warning("resumed from step %d: removed the later checkpoints %s and the final model of %s",
                       step, ", ".join(f.name for f in later), output_dir)


def latest_checkpoint(output_dir: Path) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1] if found else None


def load_trainer_state(path: Path) -> dict[str, Any]:
    """rlvr's state of a checkpoint (step, data position, counters)."""
    return json.loads((path / STATE_FILE).read_text(encoding="utf-8"))


def hf_trainer_state(global_step: int, *, max_steps: int = 0, epoch: float | None = None,
                     num_train_epochs: float = 0, log_history: list[dict] | None = None, save_steps: int = 0,
                     train_batch_size: int | None = None, num_input_tokens_seen: int = 0,
                     **best: Any) -> dict[str, Any]:
    """A transformers ``TrainerState`` as the dict ``trainer_state.json`` holds (every field, so
    ``TrainerState.load_from_json`` reads it back). Steps are optimiser steps, as transformers counts.
    ``best``: save_strategy=best's ``best_metric``, ``best_global_step``, ``best_model_checkpoint``.
    ``stateful_callbacks`` holds a ``TrainerControl``'s state, as transformers writes it (transformers' Trainer,
    resuming from the checkpoint, updates that entry at its next save)."""
    from transformers import TrainerControl, TrainerState

    state = TrainerState(epoch=epoch, global_step=global_step, max_steps=max_steps, logging_steps=1,
                         save_steps=save_steps, train_batch_size=train_batch_size, num_train_epochs=num_train_epochs,
                         num_input_tokens_seen=num_input_tokens_seen, log_history=list(log_history or []),
                         stateful_callbacks=[TrainerControl(should_save=True)], **best)
    return dataclasses.asdict(state)


def load_training_state(path: Path, *, optimizer, scheduler, model) -> None:
    """Restore optimiser, scheduler and RNG states from a checkpoint folder.

    A name-keyed optimiser state (saved from FSDP2) is loaded through ``model`` with
    torch.distributed.checkpoint's ``set_optimizer_state_dict`` (sharded again if the model is); otherwise
    transformers' two parameter groups become rlvr's one (``optimizer_layout.py``).
    """
    state = torch.load(path / "optimizer.pt", weights_only=True)
    if load_trainer_state(path).get("optimizer_format") == "fqn":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, optim_state_dict=state,
                                 options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(to_rlvr_layout(state, *decay_split(model)))
    scheduler.load_state_dict(schedule_to_rlvr(torch.load(path / "scheduler.pt", weights_only=True)))
    set_rng_state(load_rng_state(path))  # no unpickling of code


def load_model_weights(model, path: Path) -> None:
    """Load the checkpoint's safetensors weights into ``model`` in place (exact copy)."""
    from safetensors.torch import load_file

    adapter = hasattr(model, "peft_config")
    files = weight_files(path, adapter=adapter)  # the model's files only, never another *.safetensors
    if not files:
        expected = ADAPTER_WEIGHTS if adapter else f"{MODEL_WEIGHTS} (or {WEIGHTS_INDEX} and its shards)"
        raise ValueError(f"checkpoint {path} holds no {expected}; it cannot be resumed")
    absent = [f.name for f in files if not f.is_file()]
    if absent:
        raise ValueError(f"checkpoint {path}: {WEIGHTS_INDEX} names {absent[:3]}, which the folder lacks; it cannot "
                         "be resumed (copy the whole checkpoint folder)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    if adapter:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
        return
    from rlvr.parallel.runtime import is_sharded

    if is_sharded(model):  # FSDP2: every rank holds the full weights; each keeps its shard
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        missing, unexpected = set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True,
                                                                                          strict=False))
    else:
        missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied embeddings are saved once; anything else missing means a different model.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match the model (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); resume with the same model= as the original run"
        )


def _to_tuple(value: Any) -> Any:
    return tuple(_to_tuple(v) for v in value) if isinstance(value, list) else value
