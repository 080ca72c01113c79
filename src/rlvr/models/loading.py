"""Load a policy (causal LM + tokenizer) by alias, local folder or Hub id; LoRA; eos ids; reference copy.

Conventions every loader here guarantees: the tokenizer pads on the left (prompts end where
generation starts) and has a pad token (eos if the checkpoint has none); the model's
generation_config has a pad id; weights are read from safetensors only unless pickle weights are
explicitly allowed. Train/eval mode is left as loaded.
"""

from __future__ import annotations

import copy
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from huggingface_hub import is_offline_mode
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models.smollm2 import smollm2_path
from rlvr.models.tiny import tiny_random_model_and_tokenizer

if TYPE_CHECKING:
    from peft import PeftModel

logger = logging.getLogger(__name__)

IM_END = "<|im_end|>"
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
# A Hub id is "name" or "owner/name" of word characters, '-' and '.'; anything else is a path.
_HUB_ID = re.compile(r"[\w][\w.-]*(/[\w][\w.-]*)?")


def parse_dtype(dtype: str) -> torch.dtype | str:
    """'float32'/'fp32' → torch.float32, 'bfloat16'/'bf16' → torch.bfloat16, 'auto' (the checkpoint's own
    dtype, as transformers reads it) stays 'auto'; else ValueError."""
    if isinstance(dtype, str) and dtype.lower() == "auto":
        return "auto"
    if not isinstance(dtype, str) or dtype.lower() not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted([*DTYPES, 'auto'])}, got {dtype!r}")
    return DTYPES[dtype.lower()]


def _load_pretrained(
    source: str, *, dtype: torch.dtype | str, trust_remote_code: bool, use_safetensors: bool | None,
    attn_implementation: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    kwargs = dict(dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=use_safetensors)
    if attn_implementation is None:
        return AutoModelForCausalLM.from_pretrained(source, **kwargs), tokenizer
    try:
        model = AutoModelForCausalLM.from_pretrained(source, attn_implementation=attn_implementation, **kwargs)
    except (ImportError, ValueError) as error:  # e.g. flash_attention_2 without flash-attn, or on a CPU
        logger.warning("attn_implementation=%s is not available here (%s); using transformers' default (sdpa): "
                       "the same attention, another kernel", attn_implementation, " ".join(str(error).split())[:200])
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    return model, tokenizer


def _load_tiny_random(*, dtype: torch.dtype | str, seed: int,
                      attn_implementation: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    model, tokenizer = tiny_random_model_and_tokenizer(seed)
    if attn_implementation is not None:
        try:
            model.set_attn_implementation(attn_implementation)
        except (ImportError, ValueError) as error:
            logger.warning("attn_implementation=%s is not available here (%s); keeping sdpa", attn_implementation,
                           " ".join(str(error).split())[:200])
    return (model if dtype == "auto" else model.to(dtype)), tokenizer


def _load_smollm2(*, dtype: torch.dtype | str, seed: int,
                  attn_implementation: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return _load_pretrained(str(smollm2_path()), dtype=dtype, trust_remote_code=False, use_safetensors=True,
                            attn_implementation=attn_implementation)


# Alias → loader; all take (*, dtype, seed, attn_implementation). `seed` only matters for random models.
ALIASES: dict[str, Callable[..., tuple[PreTrainedModel, PreTrainedTokenizerBase]]] = {
    "smollm2-135m": _load_smollm2,
    "tiny-random": _load_tiny_random,
}


def _looks_local(name_or_path: str) -> bool:
    return name_or_path.startswith((".", "~", os.sep)) or _HUB_ID.fullmatch(name_or_path) is None


def _local_failure(path: Path, error: Exception, allow_pickle_weights: bool) -> ValueError:
    has_safetensors = any(path.glob("*.safetensors"))
    has_pickle = any(path.glob("*.bin")) or any(path.glob("*.pt"))
    hint = "it needs config.json, tokenizer files and *.safetensors weights (save with save_pretrained)"
    if has_pickle and not has_safetensors and not allow_pickle_weights:
        hint = "it only has pickle (*.bin/*.pt) weights: pass allow_pickle_weights=True if you trust them"
    return ValueError(f"could not load a model from the local folder {path}: {hint}. ({error})")


def _require_model_files(path: Path) -> None:
    """A local folder without config.json is no saved model: say so before transformers' tokenizer error."""
    if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():  # a PEFT adapter loads too
        return
    found = sorted(p.name for p in path.iterdir())
    what = "is empty" if not found else f"has no config.json (it holds {', '.join(found[:5])}{', ...' * (len(found) > 5)})"
    raise ValueError(f"model folder {path} {what}; pass a folder written by save_pretrained (config.json, tokenizer "
                     "files, *.safetensors), a run's checkpoint-N folder, or an alias "
                     f"{sorted(ALIASES)}")


def _hub_failure(name: str, error: Exception) -> ValueError:
    where = (
        "HF_HUB_OFFLINE is set, so nothing is downloaded and it is not in the local HF cache; "
        "unset HF_HUB_OFFLINE when online, or"
        if is_offline_mode()
        else "check the id and your connection, or"
    )
    return ValueError(
        f"could not load {name!r} from the Hugging Face Hub ({where} use a local folder or one of "
        f"the built-in aliases {sorted(ALIASES)}; no local folder {name!r} exists either). ({error})"
    )


def _prepare_for_rollouts(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """Left padding, a pad token (eos if missing) and a pad id in generation_config; in place."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                "the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token first"
            )
        tokenizer.pad_token = tokenizer.eos_token
        logger.warning(
            "tokenizer has no pad token; using eos %r as pad (masked by attention_mask)", tokenizer.eos_token
        )
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding only {rows} rows; "
            "call model.resize_token_embeddings(len(tokenizer)) and save the checkpoint again"
        )


def train_in_float32_on_cpu(model: torch.nn.Module, device: torch.device) -> None:
    """A float16 model on a CPU converted to float32 in place, with a line: CPU autocast and CPU kernels do not
    train float16 weights (TRL's bf16/fp16 mixed precision is a GPU feature), and float16 master weights would
    round a small update away (a 1e-6 step is below float16's resolution at 1.0)."""
    if device.type != "cpu" or not any(p.dtype == torch.float16 for p in model.parameters()):
        return
    logger.warning("the model's weights are float16 and this run is on the CPU: converted to float32 (load it "
                   "with dtype=torch.float32, or torch.bfloat16 for half the memory)")
    model.float()


def load_policy(
    name_or_path: str | os.PathLike,
    *,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    seed: int = 0,
    allow_pickle_weights: bool = False,
    attn_implementation: str | None = None,
    chat_template: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) from an alias in ALIASES, a local HF folder, or a Hub id.

    Args:
        name_or_path: 'smollm2-135m', 'tiny-random', a folder with config.json, or 'owner/name'.
        dtype: 'float32'/'fp32', 'bfloat16'/'bf16' or 'auto' (the checkpoint's own).
        trust_remote_code: passed to transformers for local folders and Hub ids.
        seed: weights seed for random aliases ('tiny-random'); ignored otherwise.
        allow_pickle_weights: also accept *.bin pickle weights (safetensors only by default).
        attn_implementation: transformers' attention kernel (None: its default); one that cannot run here
            (flash_attention_2 on a CPU) falls back to the default with a warning.
        chat_template: a Jinja template that replaces the tokenizer's (open-r1's ``chat_template``).
    """
    torch_dtype = parse_dtype(dtype)
    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ValueError(
            f"name_or_path must be an alias {sorted(ALIASES)}, a local folder or a Hub id, "
            f"got {name_or_path!r}"
        )
    name = str(name_or_path)
    use_safetensors = None if allow_pickle_weights else True
    if name in ALIASES:
        model, tokenizer = ALIASES[name](dtype=torch_dtype, seed=seed, attn_implementation=attn_implementation)
    elif (path := Path(name).expanduser()).exists():
        if not path.is_dir():
            raise ValueError(f"{path} is a file; pass the folder that holds config.json and the weights")
        _require_model_files(path)
        try:
            model, tokenizer = _load_pretrained(
                str(path),
                dtype=torch_dtype,
                trust_remote_code=trust_remote_code,
                use_safetensors=use_safetensors,
                attn_implementation=attn_implementation,
            )
        except OSError as error:
            raise _local_failure(path, error, allow_pickle_weights) from error
    elif _looks_local(name):
        raise ValueError(
            f"local model folder {name!r} does not exist (resolved to {path.resolve()}); "
            f"check the path, or use an alias {sorted(ALIASES)} or a Hub id 'owner/name'"
        )
    else:
        try:
            model, tokenizer = _load_pretrained(
                name, dtype=torch_dtype, trust_remote_code=trust_remote_code, use_safetensors=use_safetensors,
                attn_implementation=attn_implementation,
            )
        except OSError as error:
            raise _hub_failure(name, error) from error
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    _prepare_for_rollouts(model, tokenizer)
    return model, tokenizer


def given_policy(model, tokenizer=None, *, chat_template: str | None = None):
    """(model, tokenizer) for a model the caller loaded (TRL's ``GRPOTrainer(model=<model>, processing_class=...)``):
    the tokenizer given, else the one saved beside the model (its ``name_or_path``), prepared for rollouts
    as :func:`load_policy`'s are."""
    if tokenizer is None:
        name = getattr(model, "name_or_path", "") or ""
        if not name:
            raise ValueError("the model given has no name_or_path to load its tokenizer from; pass processing_class=")
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except OSError as error:
            raise ValueError(f"no tokenizer found for the model given ({name}): pass processing_class=") from error
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    _prepare_for_rollouts(model, tokenizer)
    return model, tokenizer


def apply_lora(
    model: PreTrainedModel,
    *,
    r: int,
    alpha: float,
    dropout: float,
    target_modules: str | list[str] = "all-linear",
    use_rslora: bool = False,
    use_dora: bool = False,
    modules_to_save: list[str] | None = None,
) -> PeftModel:
    """Wrap `model` with LoRA adapters (PEFT); only the adapter weights (and ``modules_to_save``'s copies)
    require grad. ``use_rslora``, ``use_dora`` and ``modules_to_save`` are PEFT's ``LoraConfig`` fields.

    Convention: update scale = alpha / r (PEFT's default), alpha / sqrt(r) with use_rslora; 'all-linear'
    targets every linear layer except the output head.
    """
    if isinstance(r, bool) or not isinstance(r, int) or r <= 0:
        raise ValueError(f"LoRA r must be a positive int, got {r!r}; e.g. r=16")
    if not alpha > 0:
        raise ValueError(f"LoRA alpha must be > 0, got {alpha!r}; e.g. alpha=2*r")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout!r}; e.g. dropout=0.0")
    from peft import LoraConfig, get_peft_model  # lazy: importing peft costs ~1.5 s

    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        bias="none",
        task_type="CAUSAL_LM",
        use_rslora=use_rslora,
        use_dora=use_dora,
        modules_to_save=modules_to_save,
    )
    return get_peft_model(model, config)


# Config attributes that hold the number of positions a model was built for, in the order tried.
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
_NO_LIMIT = 10**9  # transformers' tokenizer.model_max_length is VERY_LARGE_INTEGER (1e30) when unset


def position_limit(model, tokenizer=None, *, engine=None) -> int | None:
    """Most tokens (prompt + response) the model takes: its config's position count, None if unknown.

    Convention: ``max_position_embeddings`` (or ``n_positions``, ...) of the text config; a RoPE
    scaling (``factor`` with ``original_max_position_embeddings`` at or above that count, as Qwen's
    YaRN recipe writes it) multiplies it; the tokenizer's ``model_max_length`` is the fallback when
    the config names none. ``engine``: a rollout engine with a limit of its own (vLLM's
    ``max_model_len``) lowers it.
    """
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    limit = next((v for key in _POSITION_KEYS if isinstance(v := getattr(config, key, None), int) and v > 0), None)
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    if limit is not None and isinstance(scaling, dict) and scaling.get("factor") and scaling.get(
            "original_max_position_embeddings", 0) >= limit:
        limit = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if limit is None and isinstance(model_max_length, int) and 0 < model_max_length < _NO_LIMIT:
        limit = model_max_length
    engine_limit = getattr(engine, "max_model_len", None)
    if isinstance(engine_limit, int) and engine_limit > 0:
        limit = engine_limit if limit is None else min(limit, engine_limit)
    return limit


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ids that end a response: tokenizer eos, generation_config eos (int or list), `<|im_end|>`."""
    ids: list[int] = []
    generation_eos = getattr(model.generation_config, "eos_token_id", None)
    candidates = [tokenizer.eos_token_id]
    candidates += generation_eos if isinstance(generation_eos, (list, tuple)) else [generation_eos]
    candidates.append(tokenizer.get_vocab().get(IM_END))
    for token_id in candidates:
        if token_id is not None and int(token_id) not in ids:
            ids.append(int(token_id))
    if not ids:
        raise ValueError(
            "neither the tokenizer nor model.generation_config defines an eos token; set tokenizer.eos_token"
        )
    return ids


def copy_for_reference(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen deep copy in eval mode (requires_grad False everywhere), e.g. the KL reference."""
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def dropout_probabilities(model: torch.nn.Module) -> dict[str, float]:
    """The dropout probabilities > 0 a model would apply in train mode: its config's ``*dropout*`` /
    ``*_pdrop`` values and its dropout layers (LoRA's included), by name."""
    found: dict[str, float] = {}
    config = getattr(model, "config", None)
    for key, value in (vars(config).items() if config is not None else ()):
        if ("dropout" in key or key.endswith("_pdrop")) and isinstance(value, float) and value > 0:
            found[f"config.{key}"] = value
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            found.setdefault(type(module).__name__ if not name else name.rsplit(".", 1)[-1], module.p)
    return found


def warn_unapplied_dropout(model: torch.nn.Module) -> None:
    """disable_dropout=false (TRL's default): say which dropout rlvr does not apply, if any."""
    found = dropout_probabilities(model)
    if found:
        shown = ", ".join(f"{name}={p:g}" for name, p in list(found.items())[:4])
        logger.warning("disable_dropout=false, but rlvr runs the policy without dropout (so the on-policy ratio is "
                       "exactly 1), as TRL does with disable_dropout=true: %s not applied", shown)
