"""Progress bar during training and the closing summary."""

from __future__ import annotations

import resource
import statistics
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm


def memory_metrics(device: torch.device) -> dict[str, float]:
    """Peak memory so far: process RSS (Linux reports KiB) and, on CUDA, allocated tensors."""
    out = {"perf/max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    if device.type == "cuda":
        out["perf/cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


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
