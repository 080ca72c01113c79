"""Rollout engines: they generate responses; scoring happens elsewhere.

Every engine keeps the :class:`~rlvr.rollout.engine.RolloutEngine` contract: it takes
``(model, *, pad_token_id, eos_token_ids)`` and offers ``generate(prompts, *, max_new_tokens,
sampling, generator_seed, row_seeds) -> list[Completion]`` (``sampling``: a :class:`Sampling`) and
``sync_weights()``
(called by the trainer after every update and after a resume; a no-op for engines that sample
from the training model itself).
"""

from __future__ import annotations

import importlib

from rlvr.rollout.completion import Completion
from rlvr.rollout.engine import RolloutEngine
from rlvr.rollout.names import ROLLOUT_ENGINES, VLLM_SERVER_ENGINE
from rlvr.rollout.sampling import GREEDY, Sampling


def __getattr__(name: str):
    """``HFEngine`` on first use: importing the package (for its names) must not load transformers."""
    if name == "HFEngine":
        return engine_class("hf")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def engine_class(name: str):
    """The engine class registered as ``name`` (``vllm-server``: the client of ``rlvr vllm-serve``)."""
    classes = {**ROLLOUT_ENGINES, "vllm-server": VLLM_SERVER_ENGINE}
    if name not in classes:
        raise ValueError(f"unknown rollout_engine {name!r}: choose one of {sorted(ROLLOUT_ENGINES)}")
    module, cls = classes[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_engine(name: str, model, *, pad_token_id: int, eos_token_ids: list[int], **options) -> RolloutEngine:
    """An engine of kind ``name`` sampling from ``model``; ``options``: the engine class's own keywords."""
    return engine_class(name)(model, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids, **options)


__all__ = ["GREEDY", "ROLLOUT_ENGINES", "Completion", "HFEngine", "RolloutEngine", "Sampling", "build_engine",
           "engine_class"]
