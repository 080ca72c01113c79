"""Progress bar during training and the closing summary."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from tqdm.auto import tqdm


class Progress:
    def __init__(self, max_steps: int, start: int, *, enabled: bool):
        self.bar = tqdm(total=max_steps, initial=start, desc="rlvr train", unit="step",
                        disable=not enabled, file=sys.stderr, dynamic_ncols=True)

    def update(self, metrics: dict) -> None:
        if "rollout/reward_mean" in metrics:
            reward = metrics["rollout/reward_mean"]
            self.bar.set_postfix(reward="-" if reward is None else f"{reward:.3f}",
                                 uniform=f"{metrics['rollout/frac_uniform_groups']:.2f}",
                                 s_step=f"{metrics['time/step_s']:.1f}")
        else:  # SFT
            loss = metrics.get("train/loss")
            self.bar.set_postfix(loss="-" if loss is None else f"{loss:.3f}", s_step=f"{metrics['time/step_s']:.1f}")
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()

    @staticmethod
    def summary(records: list[dict], output_dir: Path) -> None:
        """Print reward over the first vs the last steps, and time spent."""
        if not records:
            return
        k = max(1, min(3, len(records) // 2))
        key, label = ("rollout/reward_mean", "reward") if "rollout/reward_mean" in records[0] else ("train/loss", "loss")
        values = [r[key] for r in records if r.get(key) is not None]
        total = sum(r["time/step_s"] for r in records)
        trend = ""
        if values:
            k = max(1, min(3, len(values) // 2))
            first, last = statistics.fmean(values[:k]), statistics.fmean(values[-k:])
            trend = f"{label} (mean of {k} steps) first {first:.3f} -> last {last:.3f}; "
        print(f"rlvr: {len(records)} steps in {total / 60:.1f} min; {trend}run directory {output_dir}", flush=True)
        problems = trouble_summary(records)
        if problems:
            print(f"rlvr: look at metrics.jsonl: {problems}", flush=True)


def trouble_summary(records: list[dict]) -> str:
    """What went wrong over ``records``, summed: reward-function failures, non-finite or unrewarded
    rewards, verifier timeouts, skipped optimiser steps ("" when nothing did)."""
    totals: dict[str, float] = {}
    for record in records:
        for key, value in record.items():
            counted = key == "train/skipped_steps" or (
                key.startswith("rewards/") and key.endswith(("/errors", "/nonfinite", "/timeouts", "all_none")))
            if value and counted:
                totals[key] = totals.get(key, 0.0) + value
    labels = {"/errors": "failed calls", "/nonfinite": "non-finite values", "/timeouts": "verifier timeouts"}
    parts = []
    for key, value in sorted(totals.items()):
        if key == "train/skipped_steps":
            parts.append(f"{value:.0f} optimiser steps skipped (non-finite loss or gradient)")
        elif key == "rewards/all_none":
            parts.append(f"{value:.0f} unrewarded completions (every reward function returned None)")
        else:
            name, kind = key.removeprefix("rewards/").rsplit("/", 1)
            parts.append(f"{name}: {value:.0f} {labels['/' + kind]}")
    return "; ".join(parts)
