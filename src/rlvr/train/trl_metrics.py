"""TRL's metric names, computed as TRL 1.16's GRPOTrainer computes them, beside rlvr's own.

A user's dashboards and plot scripts read ``reward``, ``completions/mean_length``, ``clip_ratio/...``:
every line of metrics.jsonl (and every tracker) carries these keys too. :data:`TRL_METRICS` maps each
to what it is and the rlvr metric nearest to it; docs/training.md's table is generated from it
(tests/train/test_trl_metrics.py checks the two agree).

How TRL computes them, and so how they are computed here:

- over the step's completions (all of them, every process): ``reward`` / ``reward_std`` (mean and
  unbiased std of the weighted reward over the completions some function scored),
  ``rewards/<f>/mean`` / ``/std`` (over the completions ``f`` scored), ``frac_reward_zero_std`` (the
  fraction of completions whose group's reward std is 0; with ``scale_rewards=batch`` the batch's std),
  ``completions/{mean,min,max}_length``, ``completions/clipped_ratio`` (truncated), the same
  lengths over the terminated completions (0 when none), ``num_tokens`` (prompt + completion tokens
  seen so far in the run);
- per micro-batch, then averaged over the step's micro-batches (what TRL logs with one line per
  generation): ``entropy``, ``kl`` (β > 0; times the ratio with use_bias_correction_kl), the clip
  fractions ``clip_ratio/low_mean``, ``high_mean``, ``region_mean`` (token means; sequence means for
  GSPO) and ``clip_ratio/low_min`` / ``high_max`` (the extreme sequence's);
- per optimiser step, averaged over the step's: ``loss``, ``grad_norm``, ``step_time``;
  ``learning_rate`` the rate the step's last optimiser step used (transformers reads it before the schedule
  moves on; rlvr's own ``train/lr`` is after), ``epoch`` = steps / steps per epoch.

Convention: rlvr's DaGRPO anchors are left out of the completion metrics (they were not sampled) and of
the entropy; on several processes a micro-batch mean is each process's own (TRL reduces it over the
processes first): the same with equal micro-batches, close otherwise.
"""

from __future__ import annotations

import math
import statistics

import torch

# sums over a step's micro-batches of each micro-batch's own mean (train/update.py accumulates them)
MICRO_MEANS = ("micro_batches", "entropy_micro", "kl_micro", "clip_low_micro", "clip_high_micro",
               "clip_region_micro", "clip_low_min_micro", "clip_high_max_micro")

# TRL's name -> (what it is, rlvr's nearest metric)
TRL_METRICS: dict[str, tuple[str, str]] = {
    "reward": ("mean weighted reward over the scored completions", "rollout/reward_mean"),
    "reward_std": ("its unbiased std over the step", "rollout/reward_std"),
    "rewards/<f>/mean": ("mean of reward function f over the completions it scored", "rewards/<f>_mean"),
    "rewards/<f>/std": ("their unbiased std", "-"),
    "frac_reward_zero_std": ("completions whose group's reward std is 0 (batch std with scale_rewards=batch)",
                             "rollout/frac_uniform_groups"),
    "completions/mean_length": ("completion tokens, mean", "rollout/response_len_mean"),
    "completions/min_length": ("completion tokens, min", "-"),
    "completions/max_length": ("completion tokens, max", "rollout/response_len_max"),
    "completions/clipped_ratio": ("fraction truncated at max_completion_length", "rollout/truncated_frac"),
    "completions/mean_terminated_length": ("tokens of the completions that ended (0 if none), mean", "-"),
    "completions/min_terminated_length": ("same, min", "-"),
    "completions/max_terminated_length": ("same, max", "-"),
    "num_tokens": ("prompt + completion tokens seen so far", "-"),
    "entropy": ("policy entropy on the trained tokens, micro-batch means averaged", "train/entropy"),
    "kl": ("k3 KL to the reference (x ratio with use_bias_correction_kl), micro-batch means averaged; beta > 0",
           "train/kl"),
    "clip_ratio/low_mean": ("tokens with ratio < 1 - epsilon and A < 0", "-"),
    "clip_ratio/high_mean": ("tokens with ratio > 1 + epsilon_high and A > 0", "-"),
    "clip_ratio/region_mean": ("either", "train/clip_frac"),
    "clip_ratio/low_min": ("the least low-clipped sequence's fraction", "-"),
    "clip_ratio/high_max": ("the most high-clipped sequence's fraction", "-"),
    "loss": ("the optimiser step's loss, averaged over the step's", "train/loss"),
    "grad_norm": ("gradient norm before clipping, averaged over the step's optimiser steps", "train/grad_norm"),
    "learning_rate": ("the rate of the step's last optimiser step, as transformers logs it (rlvr's: after it)",
                      "train/lr"),
    "epoch": ("steps / steps per epoch", "-"),
    "step_time": ("seconds per optimiser step (the step's time / its optimiser steps)", "time/step_s"),
    "entropy_coef": ("the entropy bonus coefficient (entropy_coef > 0)", "-"),
    "sampling/sampling_logp_difference/mean": (("mean absolute difference of the trainer's and the sampler's "
                                               "log-probs (the vLLM correction on)"), "rollout/logprob_mismatch"),
    "sampling/importance_sampling_ratio/min": ("the correction's weight (after truncation or masking), min",
                                               "rollout/is_weight_min"),
    "sampling/importance_sampling_ratio/mean": ("its mean", "rollout/is_weight_mean"),
    "sampling/importance_sampling_ratio/max": ("its max", "rollout/is_weight_max"),
}


# TRL's sampling/ metrics (the vLLM importance-sampling correction) <- rlvr's
SAMPLING_METRICS = {
    "sampling_logp_difference/mean": "rollout/logprob_mismatch",
    "importance_sampling_ratio/min": "rollout/is_weight_min",  # TRL logs the weights, after truncation/masking
    "importance_sampling_ratio/mean": "rollout/is_weight_mean",
    "importance_sampling_ratio/max": "rollout/is_weight_max",
}


def micro_means(out, entropy: torch.Tensor, mask: torch.Tensor, is_anchor: torch.Tensor, *,
                sequence_level: bool) -> dict[str, torch.Tensor]:
    """One micro-batch's means of TRL's train metrics (float64 scalars on the device, no host sync).

    ``out``: the micro-batch's ``rlvr.core.objective.PolicyLoss``; ``entropy`` [n, T]; ``mask`` [n, T];
    ``is_anchor`` [n]. Anchors have no ratio and were not sampled: they are left out of every mean.
    As TRL's ``global_masked_mean``: token means over the trained tokens; with a ratio per sequence (GSPO)
    the clip fractions are means over the sequences, every one of them (one with no trained token counts 0).
    """
    sampled = mask.bool() & ~is_anchor.unsqueeze(-1)  # [n, T]
    rows = ~is_anchor  # [n]
    tokens = sampled.sum(-1)  # [n]
    d = lambda value: value.detach().to(torch.float64)
    token_mean = lambda x: d(torch.where(sampled, x, torch.zeros_like(x)).sum() / sampled.sum().clamp(min=1))
    zero = torch.zeros((), dtype=torch.float64, device=mask.device)

    def per_sequence(flags: torch.Tensor) -> torch.Tensor:
        """Each row's clipped fraction; a GSPO row's flag is its sequence's (0 when it has no trained token)."""
        fraction = (flags & sampled).sum(-1).double() / tokens.clamp(min=1)
        return fraction[rows] if sequence_level else fraction[rows & (tokens > 0)]  # token level: NaN rows out

    def mean(flags: torch.Tensor) -> torch.Tensor:
        if sequence_level:
            values = per_sequence(flags)
            return values.mean() if values.numel() else zero
        return token_mean(flags.double())

    low, high = out.low_clipped, out.high_clipped
    low_seq, high_seq = per_sequence(low), per_sequence(high)
    return {
        "micro_batches": torch.ones((), dtype=torch.float64, device=mask.device),
        "entropy_micro": token_mean(entropy.double()),
        "kl_micro": token_mean(out.kl.double()) if out.kl is not None else zero,
        "clip_low_micro": mean(low), "clip_high_micro": mean(high), "clip_region_micro": mean(low | high),
        "clip_low_min_micro": low_seq.min() if low_seq.numel() else zero,
        "clip_high_max_micro": high_seq.max() if high_seq.numel() else zero,
    }


def trl_update_metrics(sums: dict[str, float], *, beta: float, loss: float | None, grad_norm: float | None,
                       learning_rate: float) -> dict[str, float | None]:
    """TRL's training metrics of one step from the update's sums (None where no micro-batch ran)."""
    count = sums.get("micro_batches", 0.0)
    mean = (lambda key: sums[key] / count) if count else (lambda key: None)
    metrics = {
        "loss": loss, "grad_norm": grad_norm, "learning_rate": learning_rate,
        "entropy": mean("entropy_micro"),
        "clip_ratio/low_mean": mean("clip_low_micro"), "clip_ratio/high_mean": mean("clip_high_micro"),
        "clip_ratio/region_mean": mean("clip_region_micro"),
        "clip_ratio/low_min": mean("clip_low_min_micro"), "clip_ratio/high_max": mean("clip_high_max_micro"),
    }
    if beta > 0:
        metrics["kl"] = mean("kl_micro")
    return metrics


def trl_rollout_metrics(groups, reward_names: list[str], *, scale_rewards: str) -> dict[str, float | None]:
    """TRL's completion and reward metrics over the step's generated groups (``Group.policy_samples``)."""
    own = [(g, i) for g in groups for i in g.on_policy]
    lengths = [len(g.completions[i].token_ids) for g, i in own]
    ended = [len(g.completions[i].token_ids) for g, i in own if not g.completions[i].truncated]
    scored = [g.rewards[i] for g, i in own if g.is_scorable(i)]
    metrics: dict[str, float | None] = {
        "completions/mean_length": statistics.fmean(lengths) if lengths else None,
        "completions/min_length": float(min(lengths)) if lengths else None,
        "completions/max_length": float(max(lengths)) if lengths else None,
        "completions/clipped_ratio": statistics.fmean(g.completions[i].truncated for g, i in own) if own else None,
        "completions/mean_terminated_length": statistics.fmean(ended) if ended else 0.0,
        "completions/min_terminated_length": float(min(ended)) if ended else 0.0,
        "completions/max_terminated_length": float(max(ended)) if ended else 0.0,
        "reward": statistics.fmean(scored) if scored else None,
        "reward_std": _std(scored),
        "frac_reward_zero_std": _frac_zero_std(groups, scored, batch=scale_rewards == "batch"),
    }
    for name in reward_names:
        values = [g.reward_parts[name][i] for g, i in own if name in g.reward_parts
                  and g.reward_parts[name][i] is not None]
        metrics[f"rewards/{name}/mean"] = statistics.fmean(values) if values else None
        metrics[f"rewards/{name}/std"] = _std(values) if values else None
    return metrics


def _std(values: list[float]) -> float | None:
    """torch's unbiased std, as TRL's nanstd: NaN (here None) for fewer than 2 values."""
    return statistics.stdev(values) if len(values) > 1 else None


def _frac_zero_std(groups, scored: list[float], *, batch: bool) -> float | None:
    """Fraction of completions whose reward std is 0 (isclose): their group's, or the batch's (scale_rewards=batch)."""
    counts = []
    for g in groups:
        rewards = [g.rewards[i] for i in g.on_policy if g.is_scorable(i)]
        spread = _std(scored) if batch else _std(rewards)
        zero = spread is not None and math.isclose(spread, 0.0, abs_tol=1e-8)  # TRL: isclose(nan, 0) is False
        counts += [zero] * len(g.on_policy)
    return statistics.fmean(counts) if counts else None


def metrics_table() -> str:
    """docs/from_trl.md's table of TRL's metric names, generated from :data:`TRL_METRICS` (a test keeps the
    page equal to it)."""
    rows = [f"| `{name}` | {what} | {'`' + ours + '`' if ours != '-' else '—'} |" for name, (what, ours) in
            TRL_METRICS.items()]
    return "\n".join(["| TRL's name (metrics.jsonl, trackers, trainer_state.json) | what it is | rlvr's own name |",
                      "|---|---|---|", *rows])
