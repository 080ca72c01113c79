"""Verifiers and reward functions: plain Python, never raising on model output.

- ``extract_answer``: the final answer of a completion (last ``\\boxed{}``, ``#### N``, "the answer is").
- ``VerifierPool``: math-verify in worker processes with a hard per-task timeout; ``gold_kinds``.
- ``answer_kind``: what counts as math and what as text in an answer (the one place).
- ``MathAccuracy``, ``format_reward``: TRL-signature rewards.
- ``resolve_reward``, ``combine_rewards``: config names → callables, weighted sum per completion.
- code rewards (``code_rewards``, ``verl_code``): programs run in ``sandbox``; ``bind_code_settings``.
"""

from rlvr.rewards.code_rewards import CODE_EXTRACTIONS, CodeSettings
from rlvr.rewards.combine import combine_rewards, reward_name
from rlvr.rewards.extract import (
    DEFAULT_EXTRACTION,
    EXTRACTION_MODES,
    MAX_ANSWER_CHARS,
    extract_answer,
    find_last_box,
)
from rlvr.rewards.math_rewards import (
    FORMAT_MAX_TAIL_CHARS,
    MathAccuracy,
    completion_text,
    format_reward,
)
from rlvr.rewards.registry import BUILTIN_REWARDS, CODE_REWARDS, bind_code_settings, is_code_reward, resolve_reward
from rlvr.rewards.reward_function import RewardFunction
from rlvr.rewards.sandbox import SANDBOX_MODES
from rlvr.rewards.verify import VerifierPool, VerifyResult, normalize_answer

__all__ = [
    "BUILTIN_REWARDS",
    "CODE_EXTRACTIONS",
    "CODE_REWARDS",
    "DEFAULT_EXTRACTION",
    "EXTRACTION_MODES",
    "FORMAT_MAX_TAIL_CHARS",
    "MAX_ANSWER_CHARS",
    "SANDBOX_MODES",
    "CodeSettings",
    "MathAccuracy",
    "RewardFunction",
    "VerifierPool",
    "VerifyResult",
    "bind_code_settings",
    "combine_rewards",
    "completion_text",
    "extract_answer",
    "find_last_box",
    "format_reward",
    "is_code_reward",
    "normalize_answer",
    "resolve_reward",
    "reward_name",
]
