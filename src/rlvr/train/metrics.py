"""Per-step rollout metrics and the sample records written to samples.jsonl.

``rollout/`` metrics describe the policy's own samples, as sampled: a DaGRPO anchor, and the
response it replaced, are seen only through ``Group.policy_samples`` (the group before injection);
the anchors' own numbers are under ``dagrpo/``. Rewards, their spread and uniformity are over the
scorable responses (some reward function gave a value; ``rewards/all_none`` counts the others).

Correctness for frac_all_correct / frac_all_wrong: a response is correct when the run's correctness
reward (``Rewarder.correctness``: the built-in ``accuracy``, or a function declaring
``is_correctness``) gave it 1.0, otherwise when its total reward is > 0.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from contextlib import contextmanager

import torch

from rlvr.train.experience import Group
from rlvr.train.rewarding import LOGGED_METRIC_PREFIX, logged_metric_means


class PhaseTimer:
    """Seconds per phase of a step on this rank (``time/<phase>_s``), and the whole step."""

    PHASES = ("rollout", "reward", "score", "update")

    def __init__(self):
        self.start = time.perf_counter()
        self.seconds = dict.fromkeys(self.PHASES, 0.0)

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0

    def metrics(self, *, with_score: bool) -> dict[str, float]:
        out = {f"time/{phase}_s": value for phase, value in self.seconds.items() if with_score or phase != "score"}
        out["time/step_s"] = time.perf_counter() - self.start
        return out


def step_metrics(step: int, rollout, advantage_metrics: dict, train_metrics: dict, *, reward_names: list[str],
                 tagrpo: bool, prompt_gap: float | None) -> dict[str, float | None]:
    """One line of metrics.jsonl (without the grad-spike, time and memory keys the trainer adds)."""
    return {
        "step": step,
        **rollout_metrics(rollout, reward_names, tagrpo=tagrpo),
        **advantage_metrics,
        **train_metrics,
        "tagrpo/anchor_logp_gap": prompt_gap,  # |log π(o|q_0) − log π(o|q_j)| of rephrased responses (None: none)
    }


def rollout_metrics(rollout, reward_names: list[str], *, tagrpo: bool = False) -> dict[str, float]:
    """rollout/ and rewards/ (and tagrpo/) metrics over every group generated in the step.

    ``reward_names``: the names the reward functions are logged under (``Rewarder.names``).
    """
    groups: list[Group] = [g.policy_samples for g in rollout.generated]
    own = [g.on_policy for g in groups]
    scored = [[i for i in idx if g.is_scorable(i)] for g, idx in zip(groups, own)]
    rewards = [g.rewards[i] for g, idx in zip(groups, scored) for i in idx]
    lengths = [len(g.completions[i].token_ids) for g, idx in zip(groups, own) for i in idx]
    truncated = [g.completions[i].truncated for g, idx in zip(groups, own) for i in idx]
    flags = [[g.correct[i] for i in idx] for g, idx in zip(groups, own)]
    per_group = [[g.rewards[i] for i in idx] for g, idx in zip(groups, scored) if idx]
    metrics: dict[str, float] = {
        "rollout/reward_mean": statistics.fmean(rewards) if rewards else None,
        "rollout/reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/frac_uniform_groups": statistics.fmean(max(r) == min(r) for r in per_group) if per_group else 1.0,
        "rollout/frac_all_correct": statistics.fmean(all(f) for f in flags),
        "rollout/frac_all_wrong": statistics.fmean(not any(f) for f in flags),
        "rollout/accuracy": statistics.fmean(x for f in flags for x in f),
        "rollout/response_len_mean": statistics.fmean(lengths),
        "rollout/response_len_max": max(lengths),
        "rollout/truncated_frac": statistics.fmean(truncated),
        "rollout/num_gen_batches": rollout.rounds,
        "rollout/kept_groups": len(rollout.kept),
    }
    for name in reward_names:
        values = [g.reward_parts[name][i] for g, idx in zip(groups, own) for i in idx
                  if name in g.reward_parts and g.reward_parts[name][i] is not None]
        metrics[f"rewards/{name}_mean"] = statistics.fmean(values) if values else None
    metrics.update({k: v for k, v in rollout.reward_counts.items() if not k.startswith(LOGGED_METRIC_PREFIX)})
    metrics.update(logged_metric_means(rollout.reward_counts))  # reward functions' log_metric values
    metrics.update(dagrpo_rollout_metrics(rollout.dagrpo_counts))
    if tagrpo:
        metrics.update(tagrpo_rollout_metrics(groups))
    return metrics


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


def dagrpo_rollout_metrics(counts: Counter | None) -> dict[str, float]:
    """Rates from the DaGRPO phase's counters summed over the step (empty when DaGRPO is off)."""
    if counts is None:
        return {}
    count = lambda key: float(counts.get(key, 0))
    scored = count("scored")
    return {
        "dagrpo/anchor_rate": count("anchor_injected") / max(1.0, count("groups")),
        "dagrpo/anchor_unavailable": count("anchor_unavailable"),
        "dagrpo/anchor_truncated": count("anchor_truncated"),
        "dagrpo/anchor_reward_mean": (count("anchor_reward_sum") / count("anchor_injected")
                                      if count("anchor_injected") else None),
        "dagrpo/scorer_fail_frac": count("scorer_failed") / scored if scored else None,
        "dagrpo/score_mean": count("score_sum") / max(1.0, scored - count("scorer_failed")) if scored else None,
    }


def sample_records(step: int, groups: list[Group], advantages: torch.Tensor | None, count: int) -> list[dict]:
    """``count`` responses spread evenly over the step's groups, for samples.jsonl."""
    flat = [(g, i) for g in groups for i in range(len(g.texts))]
    if not flat or count <= 0:
        return []
    stride = max(1, len(flat) // count)
    records = []
    for position in range(0, len(flat), stride)[:count]:
        group, i = flat[position]
        records.append({
            "step": step,
            "group_id": group.group_id,
            "id": group.row["id"],
            "prompt": group.row["prompt"],
            "answer": group.row["answer"],
            "completion": group.texts[i],
            "reward": group.rewards[i],
            "advantage": float(advantages[position]) if advantages is not None else None,
            "truncated": group.completions[i].truncated,
            "anchor": group.completions[i].is_anchor,  # DaGRPO: an expert solution, not a sample
            "variant": group.variant_of(i),  # TA-GRPO: 0 = the original question, j = rephrasing j
            **_extras(group, i),
        })
    return records


def _extras(group: Group, i: int) -> dict:
    """Response i's ``log_extra`` columns under ``extra`` (none for an anchor: no reward function logged it)."""
    if group.completions[i].is_anchor or not group.reward_extras:
        return {}
    return {"extra": {column: values[i] for column, values in group.reward_extras.items() if i < len(values)}}
