"""The model files of a checkpoint, the final model at ``output_dir``, and LoRA's base and merged models.

Every folder written here loads with ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` (layout: ``checkpoint_files.py``):

- Full fine-tuning: ``save_pretrained`` (config.json, model.safetensors, generation_config.json)
  and the tokenizer.
- LoRA: the adapter (adapter_config.json, adapter_model.safetensors), the tokenizer and the
  generation config. transformers (with peft installed) loads an adapter folder by loading
  ``base_model_name_or_path`` first, so that is always a real model: the Hub id or the absolute
  path of the local folder the run started from, or, for a base with neither (``tiny-random``,
  built in memory), ``<output_dir>/base_model/``, written once (the base is frozen under LoRA).
  Moving the run folder breaks that absolute path: edit it, or use ``save_merged_model=true``.
- ``save_merged_model=true``: also ``merged/``, the full model with every adapter folded in,
  W' = W + s·B·A (s = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora: PEFT's ``scaling``; DoRA:
  W' = m / ‖W + s·B·A‖_row · (W + s·B·A)), a ``modules_to_save`` module's trained copy in its place, computed
  from the state dict (no copy of the model; the same under FSDP, where the full state was gathered to rank 0).

Each saved model has ``training_args.bin`` beside it, as transformers' ``Trainer.save_model`` writes it.
The final model at the top of ``output_dir`` (``rlvr train`` at the end of training; TRL's ``GRPOTrainer`` only
when the script calls ``save_model()``, as TRL does) is the last step's checkpoint's model files, hard-linked (no
second copy on disk), or written from the policy when that step saved no checkpoint.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import shutil
from pathlib import Path

import torch

from rlvr.run.checkpoint_files import (
    BASE_MODEL,
    MERGED,
    TRAINING_ARGS,
    TRAINING_FILES,
    fsync_dir,
    fsync_tree,
    link_or_copy,
)

logger = logging.getLogger(__name__)

ADAPTER = "default"  # the adapter name apply_lora's get_peft_model gives
PEFT_PREFIX = "base_model.model."
FINAL_RECORD = ".rlvr-final-model.json"  # the names exported to output_dir, so that they can be replaced
_LORA_KEY = re.compile(r"^(.*)\.lora_(A|B|magnitude_vector)\.([^.]+)\.weight$")
_SAVED_MODULE = re.compile(r"^(.*)\.(original_module|modules_to_save\.[^.]+)\.([^.]+)$")  # PEFT's modules_to_save


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


def write_model(folder: Path, *, model, tokenizer, output_dir: Path, model_state: dict | None,
                merged: bool) -> None:
    """The model files of a checkpoint at the top of ``folder`` (and ``merged/`` for LoRA when asked).

    ``model_state``: the full state dict gathered from a sharded (FSDP2) model; None: read the model.
    """
    if not is_lora(model):
        model.save_pretrained(folder, safe_serialization=True, state_dict=model_state)
        tokenizer.save_pretrained(folder)
        return
    state = model.state_dict() if model_state is None else model_state
    config = model.peft_config[ADAPTER]
    config.base_model_name_or_path = lora_base(model, tokenizer, output_dir, state)
    model.save_pretrained(folder, safe_serialization=True, state_dict=model_state)
    tokenizer.save_pretrained(folder)
    model.get_base_model().generation_config.save_pretrained(folder)
    if merged:
        write_hf_model(folder / MERGED, base_state_dict(model, state, merge=True), model=model.get_base_model(),
                       tokenizer=tokenizer)


def lora_base(model, tokenizer, output_dir: Path, state: dict) -> str:
    """What ``base_model_name_or_path`` names: the Hub id, the absolute local folder, or ``base_model/``."""
    name = model.get_base_model().name_or_path or ""
    if name and Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    if name:
        return name  # a Hub id
    base = output_dir / BASE_MODEL
    if not base.is_dir():  # written atomically: an existing folder is complete
        tmp = output_dir / f".tmp-{BASE_MODEL}"
        shutil.rmtree(tmp, ignore_errors=True)
        write_hf_model(tmp, base_state_dict(model, state, merge=False), model=model.get_base_model(),
                       tokenizer=tokenizer)
        fsync_tree(tmp)
        os.replace(tmp, base)
        fsync_dir(output_dir)
        logger.info("LoRA: the base model has no folder or Hub id; saved it to %s for the adapters to name", base)
    return str(base.resolve())


def base_state_dict(model, state: dict[str, torch.Tensor], *, merge: bool) -> dict[str, torch.Tensor]:
    """The base model's state dict from a PEFT LoRA model's, with the adapters folded in when ``merge``:
    W' = W + s·B·A, or with DoRA W' = m / ‖W + s·B·A‖_row · (W + s·B·A) (PEFT's merge); a ``modules_to_save``
    module is its trained copy when merging, its original otherwise.

    Args:
        model: the PeftModel (for each LoRA layer's ``scaling`` and ``fan_in_fan_out``).
        state: its full state dict (keys ``base_model.model.<layer>.base_layer.weight``,
            ``<layer>.lora_A.default.weight`` [r, in], ``<layer>.lora_B.default.weight`` [out, r], DoRA's
            ``<layer>.lora_magnitude_vector.default.weight`` [out], ``<module>.original_module.<p>`` and
            ``<module>.modules_to_save.default.<p>``).
    Convention: the product is taken in float32 and cast back to W's dtype; DoRA's row norm is over the input
    dimension of W + s·B·A (PEFT's ``get_weight_norm``).
    """
    layers = {name: module for name, module in model.named_modules() if isinstance(getattr(module, "scaling", None),
                                                                                     dict)}
    out, factors = {}, {}
    for key, value in state.items():
        if m := _LORA_KEY.match(key):
            factors.setdefault(m.group(1), {})[m.group(2)] = value
        elif ".lora_" in key:
            raise ValueError(f"cannot export {key}: only LoRA adapters (lora_A, lora_B, DoRA's magnitude) are "
                             "supported")
        elif m := _SAVED_MODULE.match(key):
            if (m.group(2) == "original_module") != merge:  # merged: the trained copy; the base: the original
                out[f"{m.group(1)}.{m.group(3)}".removeprefix(PEFT_PREFIX)] = value
        else:
            out[key.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")] = value
    if merge:
        for name, ab in factors.items():
            target = f"{name.removeprefix(PEFT_PREFIX)}.weight"
            out[target] = _merged_weight(out[target], ab, layers[name])
    return out


def _merged_weight(weight: torch.Tensor, factors: dict[str, torch.Tensor], module) -> torch.Tensor:
    """W + s·B·A, or DoRA's m / ‖W + s·B·A‖_row · (W + s·B·A), for one layer (``weight`` as stored)."""
    delta = (factors["B"].float() @ factors["A"].float()) * module.scaling[ADAPTER]  # [out, in]
    combined = (weight.float().T if module.fan_in_fan_out else weight.float()) + delta  # [out, in]
    if "magnitude_vector" in factors:  # DoRA
        combined = combined * (factors["magnitude_vector"].float() / torch.linalg.norm(combined, dim=1))[:, None]
    return (combined.T if module.fan_in_fan_out else combined).to(weight.dtype)


def write_hf_model(folder: Path, state: dict[str, torch.Tensor], *, model, tokenizer) -> None:
    """A Hugging Face model folder from a state dict: model.safetensors, config.json (as
    ``save_pretrained`` writes it: architectures, dtype), generation_config.json, the tokenizer."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    config = copy.deepcopy(model.config)
    if getattr(config, "tie_word_embeddings", False):  # saved once, as save_pretrained does
        for key in getattr(model, "_tied_weights_keys", None) or {}:
            state.pop(key, None)
    tensors = {key: value.detach().to("cpu").contiguous().clone() for key, value in state.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.architectures = [type(model).__name__.removeprefix("FSDP")]
    config.dtype = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def save_training_args(folder: Path, training_args) -> None:
    """training_args.bin: ``torch.save`` of the run's arguments (TRL: the script's GRPOConfig; ``rlvr train``: the
    resolved config as a dict, which ``torch.load(..., weights_only=True)`` reads), as transformers writes it."""
    torch.save(training_args, folder / TRAINING_ARGS)


def export_final_model(checkpoint: Path, output_dir: Path) -> list[str]:
    """Put the checkpoint's model files at the top of ``output_dir`` (hard links); return their names.

    Each name replaces its file atomically; what an earlier export left is removed first, so a
    LoRA adapter never sits beside a full model of another run.
    """
    tmp = _fresh(output_dir / ".tmp-final-model")
    for name in sorted(p.name for p in checkpoint.iterdir() if p.name not in TRAINING_FILES):
        link_or_copy(checkpoint / name, tmp / name)
    return _move_to_top(tmp, output_dir)


def save_final_model(output_dir: Path, *, model, tokenizer, model_state: dict | None, merged: bool,
                     training_args) -> list[str]:
    """Write the model (as a checkpoint's model files, with training_args.bin) at the top of ``output_dir``, each
    file replaced atomically and recorded as :func:`export_final_model`'s are; return their names."""
    tmp = _fresh(output_dir / ".tmp-final-model")
    write_model(tmp, model=model, tokenizer=tokenizer, output_dir=output_dir, model_state=model_state, merged=merged)
    save_training_args(tmp, training_args)
    return _move_to_top(tmp, output_dir)


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder


def _move_to_top(tmp: Path, output_dir: Path) -> list[str]:
    """Replace the final model at ``output_dir``'s top by ``tmp``'s files (recorded first: a crash leaves them
    findable by :func:`remove_final_model`)."""
    remove_final_model(output_dir)
    names = sorted(p.name for p in tmp.iterdir())
    (output_dir / FINAL_RECORD).write_text(json.dumps(names), encoding="utf-8")
    for name in names:
        os.replace(tmp / name, output_dir / name)
    tmp.rmdir()
    fsync_dir(output_dir)
    return names


def remove_final_model(output_dir: Path) -> None:
    """Delete the files ``export_final_model`` put in ``output_dir`` (nothing else)."""
    record = output_dir / FINAL_RECORD
    if not record.is_file():
        return
    for name in json.loads(record.read_text(encoding="utf-8")):
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    record.unlink()
