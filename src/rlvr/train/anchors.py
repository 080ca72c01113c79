"""DaGRPO off-policy anchors: expert solutions injected into groups where the policy failed.

[design] (docs/algorithms/dagrpo.md, "Anchors"): an anchor is the row's expert solution written as a
response (``rlvr.data.anchors.anchor_text``), verified by the same verifier as the rollouts (a
rejected anchor is never used), tokenised exactly like the policy's own responses — the tokens
that follow the chat template's generation prompt, ending with EOS — and cut or skipped when longer
than ``max_completion_length``. Its reward is what the run's own reward functions give the full
expert solution (so with ``reward_funcs=accuracy,format reward_weights=1,0.1`` an anchor ranks
with the best on-policy answers, not below them); a truncated anchor is still scored on its full
text, since it stands for that solution. It then joins the group's (masked pairwise) advantage.
An anchor is always the answer to the original question q_0 (TA-GRPO: variant 0, scored on q_0 in
every ``ratio_anchor`` mode), whichever response it replaces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.config.dagrpo import DaGRPOConfig
from rlvr.data.anchors import anchor_text
from rlvr.rewards import VerifierPool, extract_answer
from rlvr.rollout import Completion
from rlvr.train.experience import Group

# (row, text) -> (total reward, per-function values), e.g. ``Rewarder.score`` for one completion
ScoreFn = Callable[[dict, str], tuple[float, dict[str, float | None]]]


@dataclass(frozen=True)
class Anchor:
    token_ids: list[int]  # the response tokens, ending with EOS unless truncated
    text: str
    truncated: bool  # cut at max_completion_length (anchor_overlong=truncate)
    reward: float = 1.0  # the run's reward functions on the full solution (1.0 when no score_fn: SFT)
    reward_parts: dict[str, float | None] = field(default_factory=dict)


class AnchorBank:
    """Anchors prepared once per row id: formatted, verified, scored, tokenised (None when unusable).

    ``score_fn`` rewards the anchor with the run's reward functions (None: SFT, where the anchor's
    reward is not used); scored once per row, outside the step's ``rewards/`` counters.
    """

    def __init__(self, tokenizer, *, eos_token_id: int, pool: VerifierPool, max_tokens: int, overlong: str,
                 score_fn: ScoreFn | None = None):
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.pool = pool
        self.max_tokens = max_tokens
        self.overlong = overlong
        self.score_fn = score_fn
        self._cache: dict[str, Anchor | None] = {}
        self.counts: Counter[str] = Counter()

    def get(self, row: dict) -> Anchor | None:
        """The row's anchor, or None (no solution, rejected by the verifier, too long to keep)."""
        if row["id"] not in self._cache:
            self._cache[row["id"]] = self._prepare(row)
        return self._cache[row["id"]]

    def _prepare(self, row: dict) -> Anchor | None:
        text = anchor_text(row)
        if text is None:
            self.counts["missing"] += 1
            return None
        (result,) = self.pool.verify_batch([row["answer"]], [extract_answer(text)])
        if not result.correct:
            self.counts["rejected"] += 1
            return None
        # scored on the whole solution, before any cut: the anchor stands for it
        reward, parts = self.score_fn(row, text) if self.score_fn is not None else (1.0, {})
        if parts and all(value is None for value in parts.values()):
            self.counts["unscored"] += 1  # every reward function returned None or failed on it
            return None
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos_token_id]
        truncated = len(ids) > self.max_tokens
        if truncated:
            if self.overlong == "skip":
                self.counts["overlong_skipped"] += 1
                return None
            self.counts["overlong_truncated"] += 1
            ids = ids[: self.max_tokens]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        self.counts["ready"] += 1
        return Anchor(ids, text, truncated, reward, parts)


def should_inject(num_correct: int, cfg: DaGRPOConfig) -> bool:
    """Trigger: always, or when at most κ = anchor_max_correct on-policy responses are correct."""
    return cfg.anchors == "always" or (cfg.anchors == "failed" and num_correct <= cfg.anchor_max_correct)


def inject_anchor(group: Group, anchor: Anchor, cfg: DaGRPOConfig) -> None:
    """Put the anchor into the group: replace the lowest-scored response, or append it.

    The group as it was is kept in ``group.before_anchor`` (``rollout/`` metrics read it). The
    anchor takes variant 0 (an expert answer to q_0) and its own reward and per-function values.
    """
    group.before_anchor = group.snapshot()
    completion = Completion(anchor.token_ids, [], truncated=anchor.truncated, is_anchor=True)
    parts = {name: anchor.reward_parts.get(name) for name in group.reward_parts}
    if cfg.anchor_placement == "append":
        slot = len(group.completions)
        group.completions.append(completion)
        group.texts.append(anchor.text)
        group.rewards.append(anchor.reward)
        for name, value in parts.items():
            group.reward_parts[name].append(value)
        for per_response in (group.scores, group.variants, group.scorable):
            if per_response is not None:
                per_response.append(None)  # set below
    else:
        ranking = group.scores if group.scores is not None else group.rewards
        slot = min(range(len(ranking)), key=lambda i: (ranking[i], i))
        group.completions[slot] = completion
        group.texts[slot] = anchor.text
        group.rewards[slot] = anchor.reward
        for name, value in parts.items():
            group.reward_parts[name][slot] = value
    if group.scores is not None:
        group.scores[slot] = anchor.reward  # rescored by the caller
    if group.variants is not None:
        group.variants[slot] = 0
    if group.scorable is not None:
        group.scorable[slot] = True
