"""DaGRPO's per-step work between reward and advantages (docs/algorithms/dagrpo.md, labels [design]).

    score : q_i from the scorer, s_i = α·r_i + (1−α)·q_i (a failed score falls back to s_i = r_i)
    anchor: in triggered groups, the expert solution replaces the lowest-scored response (or is
            appended), with the reward the run's reward functions give it and its own score

It runs inside the rollout phase, before DAPO's dynamic-sampling filter, so a group rescued by an
anchor is no longer uniform and is kept.
"""

from __future__ import annotations

import time
from collections import Counter

from rlvr.config import ExperimentConfig
from rlvr.train.anchors import AnchorBank, inject_anchor, should_inject
from rlvr.train.experience import Group


def question_text(prompt) -> str:
    """The question a scorer sees: the prompt string, or the user messages of a chat prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(m["content"] for m in prompt if m.get("role") == "user")


class DaGRPOPhase:
    """Scores responses and injects anchors for the groups of one generation round."""

    def __init__(self, cfg: ExperimentConfig, scorer, anchors: AnchorBank | None):
        self.cfg = cfg.dagrpo
        self.scorer = scorer  # None: s = r
        self.anchors = anchors

    def process(self, groups: list[Group]) -> dict[str, float]:
        """Fill ``group.scores`` and inject anchors; return counters (summed over rounds)."""
        counts: Counter[str] = Counter()
        t0 = time.perf_counter()
        self._score(groups, [(g, i) for g in groups for i in range(len(g.texts))], counts)
        if self.anchors is not None:
            injected = []
            for group in groups:
                if not should_inject(sum(group.correct), self.cfg):
                    continue
                counts["anchor_triggered"] += 1
                anchor = self.anchors.get(group.row)
                if anchor is None:
                    counts["anchor_unavailable"] += 1
                    continue
                inject_anchor(group, anchor, self.cfg)
                counts["anchor_truncated"] += anchor.truncated
                counts["anchor_reward_sum"] += anchor.reward
                injected.append((group, next(i for i, c in enumerate(group.completions) if c.is_anchor)))
            counts["anchor_injected"] += len(injected)
            self._score(groups, injected, counts)
        counts["groups"] += len(groups)
        return {f"dagrpo/_{key}": float(value) for key, value in counts.items()} | {
            "time/score_s": time.perf_counter() - t0}

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
        alpha = self.cfg.score_alpha
        for (group, i), q in zip(items, qualities):
            counts["scored"] += 1
            if q is None:
                counts["scorer_failed"] += 1
                group.scores[i] = group.rewards[i]
            else:
                group.scores[i] = alpha * group.rewards[i] + (1 - alpha) * q
                counts["score_sum"] += group.scores[i]


def build_dagrpo_phase(cfg: ExperimentConfig, *, tokenizer, eos_token_id: int, rewarder, device) -> DaGRPOPhase | None:
    """The DaGRPO phase for a run, or None when every DaGRPO mechanism is off.

    ``rewarder``: the run's :class:`~rlvr.train.rewarding.Rewarder` (its verifier pool checks the
    anchors, its reward functions score them).
    """
    d = cfg.dagrpo
    if not d.enabled:
        return None
    anchors = None
    if d.anchors != "off":
        def score_anchor(row: dict, text: str):
            totals, parts, _ = rewarder.score([row], [[text]])  # counters dropped: not the policy's
            return totals[0], {name: values[0] for name, values in parts.items()}

        anchors = AnchorBank(tokenizer, eos_token_id=eos_token_id, pool=rewarder.pool,
                             max_tokens=cfg.rollout.max_completion_length, overlong=d.anchor_overlong,
                             score_fn=score_anchor)
    return DaGRPOPhase(cfg, build_run_scorer(cfg, device=device), anchors)


def build_run_scorer(cfg: ExperimentConfig, *, device):
    """The configured fine-grained scorer (None for ``scorer=none``: s = r)."""
    d = cfg.dagrpo
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

        model, tokenizer = load_policy(d.judge_model, dtype=cfg.model.dtype, seed=cfg.run.seed)
        backend = LocalModelBackend(model.to(device).eval(), tokenizer)
    return build_scorer("judge", backend=backend)
