"""rlvr: reinforcement learning from verifiable rewards (GRPO, DaGRPO, TA-GRPO)."""

from rlvr import threads

threads.apply()  # before anything imports torch: libgomp reads its wait policy when it is loaded

__version__ = "0.1.0"


def __getattr__(name: str):
    """``from rlvr import GRPOTrainer, GRPOConfig``: TRL's Python API (rlvr.trl_api), imported when asked for."""
    if name == "GRPOConfig":
        from rlvr.trl_api.config import GRPOConfig

        return GRPOConfig
    if name == "GRPOTrainer":
        from rlvr.trl_api.trainer import GRPOTrainer

        return GRPOTrainer
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
