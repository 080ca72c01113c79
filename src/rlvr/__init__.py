"""rlvr: reinforcement learning from verifiable rewards (GRPO, DaGRPO, TA-GRPO)."""

__version__ = "0.1.0"
