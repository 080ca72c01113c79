"""The sampling settings every rollout engine takes, as one value (TRL's names and defaults).

Every engine draws x ~ softmax(warp(logits)) with, in the order transformers' ``generate`` applies
them: the repetition penalty on the logits of tokens already in the row (prompt and response so far:
a logit l becomes l / r if l > 0, else l · r), then the temperature, top_k, top_p (nucleus), min_p
(drop tokens whose probability is below min_p × the most likely token's). Temperature 0 decodes
greedily: argmax of the penalised logits, the other warps unused.

Convention (sampling log-probs): the log-prob an engine returns for a drawn token x is
log softmax(logits / T)[x], the policy's own (T = 1 when greedy), which is what the trainer
computes: the warps choose which token is drawn, they are neither renormalised into the log-prob nor
applied by the trainer. vLLM departs from this (its log-probs are of the warped distribution,
renormalised): see ``rlvr.rollout.vllm_engine``. Plain Python: importing it loads no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """How responses are drawn: temperature (0: greedy), top_p, top_k (0: off), min_p (None: off),
    repetition_penalty (1: off)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if self.min_p is not None and not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1] or None (off), got {self.min_p!r}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def warps_logprobs(self) -> tuple[str, ...]:
        """The settings under which a drawn token's warped probability differs from the policy's
        softmax(logits / T) (what an engine returning warped log-probs, as vLLM, gets wrong)."""
        warps = []
        if not self.greedy:
            warps += ["top_p"] * (self.top_p < 1) + ["top_k"] * (self.top_k > 0)
            warps += ["min_p"] * bool(self.min_p)
        return (*warps, *(["repetition_penalty"] * (self.repetition_penalty != 1)))


GREEDY = Sampling(temperature=0.0)
