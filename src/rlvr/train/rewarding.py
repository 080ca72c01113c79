"""Reward a step's groups with the configured reward functions (TRL signature).

Reward functions receive ``prompts`` (the dataset prompt: a string or a message list),
``completions`` (strings; for message-list prompts, ``[{"role": "assistant", "content": ...}]``,
as in TRL) and every other dataset column as a keyword list aligned with the completions.
"""

from __future__ import annotations

from rlvr.rewards import VerifierPool, combine_rewards, resolve_reward
from rlvr.train.experience import Group


class Rewarder:
    """Owns the verifier pool and the reward functions of a run."""

    def __init__(self, reward_funcs: list[str], reward_weights: list[float] | None, *,
                 verifier_workers: int, verifier_timeout: float, answer_extraction: str):
        self.pool = VerifierPool(num_workers=verifier_workers, timeout_s=verifier_timeout)
        self.names = list(reward_funcs)
        self.funcs = [resolve_reward(name, self.pool, answer_extraction=answer_extraction) for name in self.names]
        self.weights = list(reward_weights) if reward_weights is not None else [1.0] * len(self.funcs)

    def close(self) -> None:
        self.pool.close()

    def reward_groups(self, groups: list[Group]) -> dict[str, float]:
        """Fill ``rewards`` and ``reward_parts`` of each group; return counters for this call."""
        keys = sorted({key for group in groups for key in group.row if key != "prompt"})
        prompts, completions = [], []
        columns: dict[str, list] = {key: [] for key in keys}
        for group in groups:
            conversational = isinstance(group.row["prompt"], list)
            for text in group.texts:
                prompts.append(group.row["prompt"])
                completions.append([{"role": "assistant", "content": text}] if conversational else text)
                for key in keys:  # a column missing from some rows is passed as None there
                    columns[key].append(group.row.get(key))
        rewards, parts, counts = combine_rewards(self.funcs, self.weights, prompts, completions, columns)
        start = 0
        for group in groups:
            end = start + len(group.texts)
            group.rewards = rewards[start:end]
            group.reward_parts = {name: values[start:end] for name, values in parts.items()}
            start = end
        stats = {f"rewards/{key}": float(value) for key, value in counts.items()}
        for func in self.funcs:
            pop = getattr(func, "pop_stats", None)
            if pop is not None:
                stats.update({f"rewards/{key}": float(value) for key, value in pop().items()})
        return stats
