"""DaGRPO off-policy anchors: expert solutions injected into groups where the policy failed.

[design] (DAGRPO.md "Off-policy anchors"): an anchor is the row's expert solution written as a
response (``rlvr.data.anchors.anchor_text``), verified by the same verifier as the rollouts (a
rejected anchor is never used), tokenised exactly like the policy's own responses — the tokens
that follow the chat template's generation prompt, ending with EOS — and cut or skipped when longer
than ``max_completion_length``. Reward 1; it then joins the group's (masked pairwise) advantage.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rlvr.config.dagrpo import DaGRPOConfig
from rlvr.data.anchors import anchor_text
from rlvr.rewards import VerifierPool, extract_answer
from rlvr.rollout import Completion
from rlvr.train.experience import Group


@dataclass(frozen=True)
class Anchor:
    token_ids: list[int]  # the response tokens, ending with EOS unless truncated
    text: str
    truncated: bool  # cut at max_completion_length (anchor_overlong=truncate)


class AnchorBank:
    """Anchors prepared once per row id: formatted, verified, tokenised (None when unusable)."""

    def __init__(self, tokenizer, *, eos_token_id: int, pool: VerifierPool, max_tokens: int, overlong: str):
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.pool = pool
        self.max_tokens = max_tokens
        self.overlong = overlong
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
        return Anchor(ids, text, truncated)


def should_inject(num_correct: int, cfg: DaGRPOConfig) -> bool:
    """Trigger: always, or when at most κ = anchor_max_correct on-policy responses are correct."""
    return cfg.anchors == "always" or (cfg.anchors == "failed" and num_correct <= cfg.anchor_max_correct)


def inject_anchor(group: Group, anchor: Anchor, cfg: DaGRPOConfig) -> None:
    """Put the anchor into the group: replace the lowest-scored response, or append it."""
    text = anchor.text
    completion = Completion(anchor.token_ids, [], truncated=anchor.truncated, is_anchor=True)
    parts = {name: (1.0 if name == "accuracy" else None) for name in group.reward_parts}
    if cfg.anchor_placement == "append":
        group.completions.append(completion)
        group.texts.append(text)
        group.rewards.append(1.0)
        for name, value in parts.items():
            group.reward_parts[name].append(value)
        if group.scores is not None:
            group.scores.append(1.0)  # rescored by the caller
        return
    ranking = group.scores if group.scores is not None else group.rewards
    worst = min(range(len(ranking)), key=lambda i: (ranking[i], i))
    group.completions[worst] = completion
    group.texts[worst] = text
    group.rewards[worst] = 1.0
    for name, value in parts.items():
        group.reward_parts[name][worst] = value
