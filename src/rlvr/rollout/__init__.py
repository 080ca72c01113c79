"""Rollout engines: they generate responses; scoring happens elsewhere."""

from rlvr.rollout.hf_engine import Completion, HFEngine

# rollout_engine name -> engine class; all take (model, *, pad_token_id, eos_token_ids).
ROLLOUT_ENGINES = {"hf": HFEngine}

__all__ = ["ROLLOUT_ENGINES", "Completion", "HFEngine"]
