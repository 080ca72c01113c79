"""Policy models: loading by alias/path/Hub id, a tiny random model for tests, SmolLM2 from GGUF, LoRA."""

from rlvr.models.loading import (
    ALIASES,
    DTYPES,
    apply_lora,
    copy_for_reference,
    eos_token_ids,
    load_policy,
    parse_dtype,
)
from rlvr.models.smollm2 import smollm2_path
from rlvr.models.tiny import tiny_random_model_and_tokenizer

__all__ = [
    "ALIASES",
    "DTYPES",
    "apply_lora",
    "copy_for_reference",
    "eos_token_ids",
    "load_policy",
    "parse_dtype",
    "smollm2_path",
    "tiny_random_model_and_tokenizer",
]
