"""TA-GRPO options (docs/algorithms/tagrpo.md). Labels: [paper], [code] (the authors' verl fork), [design] (ours).

Every [design] choice is a knob with the spec's default; docs/algorithms/tagrpo.md has the labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import _f, _fail

RATIO_ANCHORS = ("original", "unanchored", "truncated_is")


@dataclass(frozen=True)
class TAGRPOConfig:
    num_rephrasings: int = _f(0, "N rephrasings per question; pools of (N+1)*G responses (0: off; refused with "
                                 "the TA-GRPO algos tagrpo*, equal_sampling)")
    rephrasings_file: str | None = _f(None, "JSONL from `rlvr rephrase` joined to the data by id")
    rephrase_missing: str = _f("rules", "rows without rephrasings: rules (made at load time, cached) | error")
    pooled: bool = _f(True, "joint advantages over the whole pool (false: each variant is its own group)")
    ratio_anchor: str = _f("original", "score responses on: original q_0 (v5) | unanchored (q_j, authors' code) | truncated_is")
    truncated_is_cap: float = _f(2.0, "truncated_is: cap on pi(o|q_0)/pi_old(o|q_j) per token")
    equal_sampling: bool = _f(False, "control: (N+1)*G responses to q_0 only, no rephrasings")
    diversity_steps: int = _f(0, "every K steps log rollout/diversity (MiniLM embeddings; 0: off)")
    diversity_groups: int = _f(4, "groups sampled for the diversity metric")

    def __post_init__(self) -> None:
        if self.num_rephrasings < 0:
            _fail("num_rephrasings", self.num_rephrasings, "use 0 (off) or a positive count such as 4")
        if self.rephrase_missing not in ("rules", "error"):
            _fail("rephrase_missing", self.rephrase_missing, "choose rules or error")
        if self.ratio_anchor not in RATIO_ANCHORS:
            _fail("ratio_anchor", self.ratio_anchor, f"choose one of {RATIO_ANCHORS}")
        if self.truncated_is_cap <= 1:
            _fail("truncated_is_cap", self.truncated_is_cap, "use a cap > 1 (e.g. 2)")
        if self.equal_sampling and self.num_rephrasings == 0:
            _fail("equal_sampling", self.equal_sampling, "set num_rephrasings=N: the budget is (N+1)*G responses")
        if self.diversity_steps < 0 or self.diversity_groups < 1:
            _fail("diversity_steps/diversity_groups", (self.diversity_steps, self.diversity_groups),
                  "use diversity_steps >= 0 and diversity_groups >= 1")

    @property
    def enabled(self) -> bool:
        """Rephrased variants are sampled (equal_sampling samples q_0 only)."""
        return self.num_rephrasings > 0 and not self.equal_sampling

    @property
    def responses_per_prompt_factor(self) -> int:
        """(N+1) for pools and for equal_sampling, else 1."""
        return self.num_rephrasings + 1 if self.num_rephrasings > 0 else 1
