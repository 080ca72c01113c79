"""The rollout engines by name, without importing any of them (nor transformers).

``rlvr.config`` validates ``rollout_engine`` against these names; importing an engine's module
would load transformers (or vLLM) into every ``rlvr train --help``.
"""

from __future__ import annotations

# rollout_engine name -> "module:Class", imported on first use (vLLM is an optional dependency).
ROLLOUT_ENGINES = {
    "rlvr": "rlvr.rollout.decode_engine:DecodeEngine",
    "hf": "rlvr.rollout.hf_engine:HFEngine",
    "vllm": "rlvr.rollout.vllm_engine:VLLMEngine",
}
# what `rlvr train --help` says of each (rollout_engine's help lists every name above, with its line here if any)
ROLLOUT_ENGINE_SUMMARIES = {
    "rlvr": "own loop on the transformers model: shared prefill, preallocated KV cache, finished rows dropped",
    "hf": "transformers generate",
    "vllm": "optional, own environment; vllm_mode: colocate or server",
}

# the engine TRL's use_vllm=true names (rlvr.config.trl_names translates TRL's flag into this name; everything
# else asks an engine class for its abilities, rlvr.rollout.engine)
TRL_USE_VLLM_ENGINE = "vllm"

# rollout_engine=vllm with vllm_mode=server: the client of `rlvr vllm-serve` (chosen by the trainer, not a name)
VLLM_SERVER_ENGINE = "rlvr.rollout.vllm_client:VLLMServerEngine"
