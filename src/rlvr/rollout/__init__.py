"""Rollout engines: they generate responses; scoring happens elsewhere.

Every engine takes ``(model, *, pad_token_id, eos_token_ids)`` and offers
``generate(prompts, *, max_new_tokens, temperature, top_p, generator_seed) -> list[Completion]``
and ``sync_weights()`` (called by the trainer after every update and after a resume; a no-op for
engines that sample from the training model itself).
"""

from __future__ import annotations

import importlib

from rlvr.rollout.completion import Completion
from rlvr.rollout.hf_engine import HFEngine

# rollout_engine name -> "module:Class", imported on first use (vLLM is an optional dependency).
ROLLOUT_ENGINES = {
    "rlvr": "rlvr.rollout.decode_engine:DecodeEngine",
    "hf": "rlvr.rollout.hf_engine:HFEngine",
    "vllm": "rlvr.rollout.vllm_engine:VLLMEngine",
}


def engine_class(name: str):
    """The engine class registered as ``name``."""
    if name not in ROLLOUT_ENGINES:
        raise ValueError(f"unknown rollout_engine {name!r}: choose one of {sorted(ROLLOUT_ENGINES)}")
    module, cls = ROLLOUT_ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_engine(name: str, model, *, pad_token_id: int, eos_token_ids: list[int]):
    """An engine of kind ``name`` sampling from ``model``."""
    return engine_class(name)(model, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids)


__all__ = ["ROLLOUT_ENGINES", "Completion", "HFEngine", "build_engine", "engine_class"]
