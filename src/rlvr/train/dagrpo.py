"""DaGRPO's per-step work between reward and advantages (docs/algorithms/dagrpo.md, labels [design]).

    score : q_i from the scorer, s_i = α·r_i + (1−α)·q_i (a failed score falls back to s_i = r_i)
    anchor: in triggered groups, the expert solution replaces the lowest-scored response (or is
            appended), with the reward the run's reward functions give it and its own score

It runs inside the rollout phase, before DAPO's dynamic-sampling filter, so a group rescued by an
anchor is no longer uniform and is kept. The pairwise advantage is ``rlvr.core.advantages.dagrpo``,
the anchors' loss term ``rlvr.core.losses.anchor_surrogate``; the settings are the plan's
(``plan.DaGRPOSettings``), the scorer is built at set-up (``setup.build_scorer``).

Anchors [design] ("Anchors" in the design page): an anchor is the row's expert solution written as a
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

from rlvr.data.anchors import anchor_text
from rlvr.rewards import VerifierPool, extract_answer
from rlvr.rollout import Completion
from rlvr.train.plan import DaGRPOSettings
from rlvr.train.rollout_phase import Group


def question_text(prompt) -> str:
    """The question a scorer sees: the prompt string, or the user messages of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(m["content"] for m in prompt if m.get("role") == "user")


class DaGRPOPhase:
    """Scores responses and injects anchors for the groups of one generation round."""

    def __init__(self, settings: DaGRPOSettings, scorer, anchors: AnchorBank | None):
        self.settings = settings
        self.alpha = settings.score_alpha
        self.scorer = scorer  # None: s = r
        self.anchors = anchors  # None: anchors=off

    def process(self, groups: list[Group]) -> Counter:
        """Fill ``group.scores`` and inject anchors; return this round's counters (``metrics.dagrpo_rollout_metrics``
        turns the step's sums into rates)."""
        counts: Counter[str] = Counter()
        self._score(groups, [(g, i) for g in groups for i in range(len(g.texts))], counts)
        if self.anchors is not None:
            injected = []
            for group in groups:
                if not should_inject(sum(group.correct), self.settings):
                    continue
                counts["anchor_triggered"] += 1
                anchor = self.anchors.get(group.row)
                if anchor is None:
                    counts["anchor_unavailable"] += 1
                    continue
                inject_anchor(group, anchor, self.settings.anchor_placement)
                counts["anchor_truncated"] += anchor.truncated
                counts["anchor_reward_sum"] += anchor.reward
                injected.append((group, next(i for i, c in enumerate(group.completions) if c.is_anchor)))
            counts["anchor_injected"] += len(injected)
            self._score(groups, injected, counts)
        counts["groups"] += len(groups)
        return counts

    def _score(self, groups: list[Group], items: list[tuple[Group, int]], counts: Counter) -> None:
        """s = α·r + (1−α)·q for the (group, index) items; q from the scorer, s = r on failure."""
        for group in groups:
            if group.scores is None:
                group.scores = list(group.rewards)
        if self.scorer is None or not items:
            for group, i in items:
                group.scores[i] = group.rewards[i]
            return
        qualities = self.scorer(
            [question_text(g.row["prompt"]) for g, _ in items],
            [g.texts[i] for g, i in items],
            [g.row.get("solution") for g, _ in items],
            [g.rewards[i] for g, i in items],
        )
        alpha = self.alpha
        for (group, i), q in zip(items, qualities):
            counts["scored"] += 1
            if q is None:
                counts["scorer_failed"] += 1
                group.scores[i] = group.rewards[i]
            else:
                group.scores[i] = alpha * group.rewards[i] + (1 - alpha) * q
                counts["score_sum"] += group.scores[i]


# (row, text) -> (total reward, per-function values), e.g. ``Rewarder.reward_texts`` for one completion
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
    reward is not used); scored once per row, outside the step's ``rewards/`` counters. ``texts``: each
    row id's anchor text, written at set-up for the run's rows (:func:`anchor_texts`; a row not in it gets
    its text when first asked); verifying, scoring and tokenising wait until a group needs the anchor.
    """

    def __init__(self, tokenizer, *, eos_token_id: int, pool: VerifierPool, max_tokens: int, overlong: str,
                 score_fn: ScoreFn | None = None, texts: dict[str, str | None] | None = None):
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.pool = pool
        self.max_tokens = max_tokens
        self.overlong = overlong
        self.score_fn = score_fn
        self.texts = texts or {}
        self._cache: dict[str, Anchor | None] = {}
        self.counts: Counter[str] = Counter()

    def get(self, row: dict) -> Anchor | None:
        """The row's anchor, or None (no solution, rejected by the verifier, too long to keep)."""
        if row["id"] not in self._cache:
            self._cache[row["id"]] = self._prepare(row)
        return self._cache[row["id"]]

    def _prepare(self, row: dict) -> Anchor | None:
        text = self.texts[row["id"]] if row["id"] in self.texts else anchor_text(row)
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


def should_inject(num_correct: int, s: DaGRPOSettings) -> bool:
    """Trigger: always, or when at most κ = anchor_max_correct on-policy responses are correct."""
    return s.anchors == "always" or (s.anchors == "failed" and num_correct <= s.anchor_max_correct)


def inject_anchor(group: Group, anchor: Anchor, placement: str) -> None:
    """Put the anchor into the group: replace the lowest-scored response (``replace_worst``), or ``append`` it.

    The group as it was is kept in ``group.before_anchor`` (``rollout/`` metrics read it). The
    anchor takes variant 0 (an expert answer to q_0) and its own reward and per-function values.
    """
    group.before_anchor = group.snapshot()
    completion = Completion(anchor.token_ids, [], truncated=anchor.truncated, is_anchor=True)
    parts = {name: anchor.reward_parts.get(name) for name in group.reward_parts}
    if placement == "append":
        slot = len(group.completions)
        group.completions.append(completion)
        group.texts.append(anchor.text)
        group.rewards.append(anchor.reward)
        for name, value in parts.items():
            group.reward_parts[name].append(value)
        for per_response in (group.scores, group.variants, group.rewarded):
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
    if group.rewarded is not None:
        group.rewarded[slot] = True


def anchor_texts(rows: list[dict]) -> dict[str, str | None]:
    """Each row's anchor text (None: it has none), by id: string work only, made once at set-up."""
    return {row["id"]: anchor_text(row) for row in rows}


def build_dagrpo_phase(settings: DaGRPOSettings | None, scorer, *, rows: list[dict], max_completion_length: int,
                       tokenizer, eos_token_id: int, rewarder) -> DaGRPOPhase | None:
    """The DaGRPO phase for a run, or None when every DaGRPO mechanism is off (``settings`` None).

    ``scorer``: the fine-grained scorer (None: s = r); ``rows``: the run's rows (their anchor texts are
    written now); ``rewarder``: the run's :class:`~rlvr.train.rewarding.Rewarder` (its verifier pool checks
    the anchors; in RL its reward functions score them — SFT (``settings.score_anchors`` False) uses no
    reward, so a reward function that cannot score a solution does not drop it).
    """
    if settings is None:
        return None
    anchors = None
    if settings.anchors != "off":
        def score_anchor(row: dict, text: str):
            totals, parts, _ = rewarder.reward_texts([row], [[text]])  # counters dropped: not the policy's
            return totals[0], {name: values[0] for name, values in parts.items()}

        anchors = AnchorBank(tokenizer, eos_token_id=eos_token_id, pool=rewarder.pool,
                             max_tokens=max_completion_length, overlong=settings.anchor_overlong,
                             score_fn=score_anchor if settings.score_anchors else None, texts=anchor_texts(rows))
    return DaGRPOPhase(settings, scorer, anchors)
