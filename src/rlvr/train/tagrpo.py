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
"""

from __future__ import annotations

from dataclasses import dataclass

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
