"""Fine-grained scorers for DaGRPO's sequence-level gradient rectification (docs/algorithms/dagrpo.md, step 1 and "Scorers").

Every scorer is called as ``scorer(questions, responses, references, rewards)`` and returns a
quality score q ∈ [0, 1] per response, or None where scoring failed (the trainer then uses
s = r and counts it); it never raises on model output. ``pop_stats()`` returns its counters
(``calls``, ``failures``, ``seconds``, and its own) and resets them.

- ``reward``: q = r (SGR on the reward alone).
- ``steps``: fraction of the written equations that hold, exact arithmetic; q = r when there are
  none. OUR offline stand-in for the paper's LLM judge (a deviation).
- ``embed``: cosine similarity to the reference solution (all-MiniLM-L6-v2); a deviation.
- ``judge``: an LLM rates the reasoning 0–10 (``JUDGE_PROMPT``), over an OpenAI-compatible server
  or a local transformers model; the paper's kind of scorer.
"""

from rlvr.rewards.scorers.base import Scorer
from rlvr.rewards.scorers.embed import EmbedScorer
from rlvr.rewards.scorers.judge import (
    JUDGE_PROMPT,
    JUDGE_REFERENCE_BLOCK,
    Judge,
    JudgeBackend,
    build_prompt,
    parse_score,
)
from rlvr.rewards.scorers.judge_backends import LocalModelBackend, OpenAIChatBackend
from rlvr.rewards.scorers.registry import (
    JUDGE_BACKENDS,
    SCORERS,
    build_judge,
    build_scorer,
)
from rlvr.rewards.scorers.steps import Equation, RewardScorer, StepsScorer, find_equations

__all__ = [
    "JUDGE_BACKENDS",
    "JUDGE_PROMPT",
    "JUDGE_REFERENCE_BLOCK",
    "SCORERS",
    "EmbedScorer",
    "Equation",
    "Judge",
    "JudgeBackend",
    "LocalModelBackend",
    "OpenAIChatBackend",
    "RewardScorer",
    "Scorer",
    "StepsScorer",
    "build_judge",
    "build_prompt",
    "build_scorer",
    "find_equations",
    "parse_score",
]
