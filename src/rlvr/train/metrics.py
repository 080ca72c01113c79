"""Per-step rollout metrics and the sample records written to samples.jsonl.

Correctness for frac_all_correct / frac_all_wrong: a response is correct when the ``accuracy``
reward gave it 1.0 (when ``accuracy`` is among the reward functions), otherwise when its total
reward is > 0.
"""

from __future__ import annotations

import statistics

import torch

from rlvr.train.experience import Group


def correct_flags(group: Group) -> list[bool]:
    if "accuracy" in group.reward_parts:
        return [value == 1.0 for value in group.reward_parts["accuracy"]]
    return [reward > 0 for reward in group.rewards]


def rollout_metrics(rollout, reward_names: list[str]) -> dict[str, float]:
    """rollout/ and rewards/ metrics over every group generated in the step."""
    groups: list[Group] = rollout.generated
    rewards = [r for g in groups for r in g.rewards]
    lengths = [len(c.token_ids) for g in groups for c in g.completions]
    truncated = [c.truncated for g in groups for c in g.completions]
    flags = [correct_flags(g) for g in groups]
    metrics: dict[str, float] = {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/frac_uniform_groups": statistics.fmean(g.uniform for g in groups),
        "rollout/frac_all_correct": statistics.fmean(all(f) for f in flags),
        "rollout/frac_all_wrong": statistics.fmean(not any(f) for f in flags),
        "rollout/accuracy": statistics.fmean(x for f in flags for x in f),
        "rollout/response_len_mean": statistics.fmean(lengths),
        "rollout/response_len_max": max(lengths),
        "rollout/truncated_frac": statistics.fmean(truncated),
        "rollout/num_gen_batches": rollout.rounds,
        "rollout/kept_groups": len(rollout.kept),
        "_generated_tokens": float(sum(lengths)),
    }
    for name in reward_names:
        values = [v for g in groups for v in g.reward_parts.get(name, []) if v is not None]
        metrics[f"rewards/{name}_mean"] = statistics.fmean(values) if values else None
    metrics.update(rollout.reward_stats)
    return metrics


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
        })
    return records
