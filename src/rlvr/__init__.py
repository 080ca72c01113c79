"""rlvr: reinforcement learning from verifiable rewards (GRPO, DaGRPO, TA-GRPO)."""

from rlvr import threads

threads.apply()  # before anything imports torch: libgomp reads its wait policy when it is loaded

__version__ = "0.1.0"
