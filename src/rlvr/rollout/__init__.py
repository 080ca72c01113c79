"""Rollout engines: they generate responses; scoring happens elsewhere."""

from rlvr.rollout.hf_engine import Completion, HFEngine

__all__ = ["Completion", "HFEngine"]
