"""TA-GRPO's defining choice: on which prompt each log-prob pass scores a response.

Every response is sampled from a variant q_j of its question (q_0 the original, q_1..q_N its
rephrasings) and rewarded against q_0's gold. Its log-probs can be computed on q_0 or on the q_j it
was sampled from, per pass (policy, old/behaviour, reference); ``ratio_anchor`` picks the
combination (docs/algorithms/tagrpo.md):

    original      q_0 for all three: the ratio is π(o|q_0)/π_old(o|q_0)   (the paper's choice)
    unanchored    q_j for all three: each response on the prompt it came from
    truncated_is  q_0 for the policy and the reference, q_j for the behaviour policy: the ratio
                  π(o|q_0)/π_old(o|q_j) corrects for the prompt swap, truncated at ``truncated_is_cap``

Without rephrasings every response comes from q_0 and the choice makes no difference: the plan then
has no :class:`LogprobPrompts` and :func:`logprob_prompt` is never called.

TA-GRPO's own rollout metrics (``tagrpo/``, :func:`tagrpo_rollout_metrics`) are here too: what pooling recovers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.train.rollout_phase import Group

QUESTION = "question"  # score on q_0, the original question
SAMPLED = "sampled"  # score on the prompt the response was sampled from (q_j)


@dataclass(frozen=True)
class LogprobPrompts:
    """The prompt (``QUESTION`` or ``SAMPLED``) each log-prob pass scores a response on."""

    policy: str = QUESTION
    old: str = QUESTION
    reference: str = QUESTION

    @classmethod
    def for_ratio_anchor(cls, ratio_anchor: str) -> LogprobPrompts:
        """TA-GRPO's ``ratio_anchor`` as the prompt of each pass (the module's table)."""
        return {
            "original": cls(QUESTION, QUESTION, QUESTION),
            "unanchored": cls(SAMPLED, SAMPLED, SAMPLED),
            "truncated_is": cls(QUESTION, SAMPLED, QUESTION),
        }[ratio_anchor]


def logprob_prompt(choice: str, question_ids: list[int], sampled_ids: list[int]) -> list[int]:
    """The prompt a pass scores a response on: q_0 (``QUESTION``), or the q_j it was sampled from (``SAMPLED``)."""
    return sampled_ids if choice == SAMPLED else question_ids


def tagrpo_rollout_metrics(groups: list[Group]) -> dict[str, float]:
    """Uniform fractions per variant group (G responses to one q_j) vs per pool (all variants),
    over the policy's samples (pass ``Group.policy_samples``).

    ``pool_rescue_frac``: of the uniform variant groups, the fraction whose pool is not uniform —
    the gradient that pooling recovers (docs/algorithms/tagrpo.md, "Why pooling helps").
    """
    by_pool: dict[int, dict[int, list[float]]] = {}
    for g in groups:
        for i in g.on_policy:
            by_pool.setdefault(g.pool, {}).setdefault(g.variant_of(i), []).append(g.rewards[i])
    variant_uniform, pool_uniform, rescued = [], [], 0
    for variants in by_pool.values():
        whole = [r for rewards in variants.values() for r in rewards]
        pool_is_uniform = max(whole) == min(whole)
        pool_uniform.append(pool_is_uniform)
        for rewards in variants.values():
            uniform = max(rewards) == min(rewards)
            variant_uniform.append(uniform)
            rescued += uniform and not pool_is_uniform
    uniform_variants = sum(variant_uniform)
    return {
        "tagrpo/frac_uniform_variant_groups": statistics.fmean(variant_uniform),
        "tagrpo/frac_uniform_pools": statistics.fmean(pool_uniform),
        "tagrpo/pool_rescue_frac": rescued / uniform_variants if uniform_variants else 0.0,
        "tagrpo/variants_per_pool": statistics.fmean(len(v) for v in by_pool.values()),
    }
