"""DaGRPO's per-step work between reward and advantages (docs/algorithms/dagrpo.md, labels [design]).

    score : q_i from the scorer, s_i = α·r_i + (1−α)·q_i (a failed score falls back to s_i = r_i)
    anchor: in triggered groups, the expert solution replaces the lowest-scored response (or is
            appended), with the reward the run's reward functions give it and its own score

It runs inside the rollout phase, before DAPO's dynamic-sampling filter, so a group rescued by an
anchor is no longer uniform and is kept.
"""

from __future__ import annotations

from collections import Counter

from rlvr.config.dagrpo import DaGRPOConfig
from rlvr.train.anchors import AnchorBank, inject_anchor, should_inject
from rlvr.train.experience import Group


def question_text(prompt) -> str:
    """The question a scorer sees: the prompt string, or the user messages of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(m["content"] for m in prompt if m.get("role") == "user")


class DaGRPOPhase:
    """Scores responses and injects anchors for the groups of one generation round."""

    def __init__(self, settings: DaGRPOConfig, scorer, anchors: AnchorBank | None):
        self.anchor_settings = settings  # anchors, anchor_max_correct, anchor_placement
        self.alpha = settings.score_alpha
        self.scorer = scorer  # None: s = r
        self.anchors = anchors

    def process(self, groups: list[Group]) -> Counter:
        """Fill ``group.scores`` and inject anchors; return this round's counters (``metrics.dagrpo_rollout_metrics``
        turns the step's sums into rates)."""
        counts: Counter[str] = Counter()
        self._score(groups, [(g, i) for g in groups for i in range(len(g.texts))], counts)
        if self.anchors is not None:
            injected = []
            for group in groups:
                if not should_inject(sum(group.correct), self.anchor_settings):
                    continue
                counts["anchor_triggered"] += 1
                anchor = self.anchors.get(group.row)
                if anchor is None:
                    counts["anchor_unavailable"] += 1
                    continue
                inject_anchor(group, anchor, self.anchor_settings)
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


def build_dagrpo_phase(d: DaGRPOConfig, *, max_completion_length: int, model_dtype: str, seed: int, tokenizer,
                       eos_token_id: int, rewarder, device) -> DaGRPOPhase | None:
    """The DaGRPO phase for a run, or None when every DaGRPO mechanism is off.

    ``rewarder``: the run's :class:`~rlvr.train.rewarding.Rewarder` (its verifier pool checks the
    anchors, its reward functions score them).
    """
    if not d.enabled:
        return None
    anchors = None
    if d.anchors != "off":
        def score_anchor(row: dict, text: str):
            totals, parts, _ = rewarder.score([row], [[text]])  # counters dropped: not the policy's
            return totals[0], {name: values[0] for name, values in parts.items()}

        anchors = AnchorBank(tokenizer, eos_token_id=eos_token_id, pool=rewarder.pool,
                             max_tokens=max_completion_length, overlong=d.anchor_overlong,
                             score_fn=score_anchor)
    return DaGRPOPhase(d, build_run_scorer(d, model_dtype=model_dtype, seed=seed, device=device), anchors)


def build_run_scorer(d: DaGRPOConfig, *, model_dtype: str, seed: int, device):
    """The configured fine-grained scorer (None for ``scorer=none``: s = r); a local judge loads in ``model_dtype``."""
    if d.scorer == "none":
        return None
    from rlvr.rewards.scorers import build_scorer

    if d.scorer != "judge":
        return build_scorer(d.scorer)
    if d.judge_base_url is not None:
        from rlvr.rewards.scorers import OpenAIChatBackend

        backend = OpenAIChatBackend(d.judge_base_url, d.judge_model_name, api_key_env=d.judge_api_key_env,
                                    timeout_s=d.judge_timeout, max_retries=d.judge_max_retries,
                                    allow_plain_http=d.judge_allow_plain_http,
                                    on_failure="their scores fall back to s = r (dagrpo/scorer_fail_frac)")
    else:
        from rlvr.models import load_policy
        from rlvr.rewards.scorers import LocalModelBackend

        model, tokenizer = load_policy(d.judge_model, dtype=model_dtype, seed=seed)
        backend = LocalModelBackend(model.to(device).eval(), tokenizer)
    return build_scorer("judge", backend=backend)
