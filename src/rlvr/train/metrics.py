"""The step's metrics: rlvr's own (``rollout/``, ``train/``, ``dagrpo/``, ``tagrpo/``, ``time/``, ``perf/``),
gradient-norm spikes, and TRL's metric names computed as TRL 1.16's GRPOTrainer computes them. What the update
measures is here too: its result (:class:`UpdateResult`), the micro-batch statistics (:func:`micro_statistics`)
and their accumulator on the device (:class:`Statistics`). The names of TRL's metrics, and the name TRL's log gives
each series, are rlvr.train.trl_metric_names's.

Gradient-norm spikes (:class:`GradSpikes`): a step whose pre-clip norm exceeds k× the running median of
earlier steps is counted (DaGRPO's paper claims to mitigate gradient explosion; this counter is how
a run shows it).

TRL's names. TRL's metric names, computed as TRL 1.16's GRPOTrainer computes them, beside rlvr's own.

A user's dashboards and plot scripts read ``reward``, ``completions/mean_length``, ``clip_ratio/...``:
every line of metrics.jsonl (and every tracker) carries these keys too. ``trl_metric_names.TRL_METRICS`` maps each
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

import logging
import math
import resource
import statistics
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from rlvr.core.logprobs import log_ratio
from rlvr.core.loss_variants import cispo_clipped, vespo_weights
from rlvr.core.losses import micro_means
from rlvr.eval import group_diversity
from rlvr.run.stopping import TrainingStopped
from rlvr.train.rewarding import LOGGED_METRIC_PREFIX, logged_metric_means
from rlvr.train.tagrpo import tagrpo_rollout_metrics
from rlvr.train.trl_metric_names import SAMPLING_METRICS, UNCLIPPED_LOSSES

if TYPE_CHECKING:
    from rlvr.core.losses import LossSettings, PolicyLoss
    from rlvr.parallel.runtime import DistContext
    from rlvr.train.batching import LossInputs
    from rlvr.train.plan import UpdateSettings
    from rlvr.train.rollout_phase import Group

logger = logging.getLogger(__name__)

WINDOW = 50  # running median over the last WINDOW steps
MIN_HISTORY = 5  # no verdict before this many steps
class GradSpikes:
    def __init__(self, *, factor: float):
        self.factor = factor
        self.history: list[float] = []
        self.total = 0

    def update(self, grad_norm: float | None) -> dict[str, float]:
        """Record this step's norm; return train/grad_norm_spike (0/1) and the running count."""
        spike = 0
        if grad_norm is not None:
            if len(self.history) >= MIN_HISTORY and grad_norm > self.factor * statistics.median(self.history):
                spike = 1
            self.history = (self.history + [grad_norm])[-WINDOW:]
        self.total += spike
        return {"train/grad_norm_spike": spike, "train/grad_norm_spikes": self.total}

    def state_dict(self) -> dict:
        return {"history": list(self.history), "total": self.total}

    def load_state_dict(self, state: dict) -> None:
        self.history, self.total = list(state["history"]), int(state["total"])


def memory_metrics(device: torch.device) -> dict[str, float]:
    """Peak memory so far: process RSS (Linux reports KiB) and, on CUDA, allocated tensors."""
    out = {"perf/max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    if device.type == "cuda":
        out["perf/cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


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
    scored = [[i for i in idx if g.is_rewarded(i)] for g, idx in zip(groups, own)]
    rewards = [g.rewards[i] for g, idx in zip(groups, scored) for i in idx]
    lengths = [model_tokens(g.completions[i]) for g, idx in zip(groups, own) for i in idx]
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
    metrics.update(tool_metrics([g.completions[i] for g, idx in zip(groups, own) for i in idx]))
    if tagrpo:
        metrics.update(tagrpo_rollout_metrics(groups))
    return metrics


def tool_metrics(completions: list) -> dict[str, float]:
    """tools/ over the step's sampled responses (a run with tools: rlvr.rollout.tool_loop; none otherwise). TRL's
    two: calls per completion, failed calls per call (0 with no call)."""
    uses = [c.tool_use for c in completions if c.tool_use is not None]
    if not uses:
        return {}
    calls = sum(u.calls for u in uses)
    called = [u for u in uses if u.calls]
    return {"tools/call_frequency": calls / len(uses),
            "tools/failure_frequency": sum(u.failures for u in uses) / calls if calls else 0.0,
            "tools/seconds_mean": statistics.fmean(u.seconds for u in called) if called else 0.0,
            "tools/cut_by_call_limit_frac": statistics.fmean(u.cut_by_call_limit for u in uses),
            "tools/result_dropped_frac": statistics.fmean(u.result_dropped for u in uses)}


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


def sample_records(step: int, groups: list[Group], advantages: torch.Tensor | None, count: int | None) -> list[dict]:
    """``count`` responses spread evenly over the step's groups (None: all), for samples.jsonl; in a run with
    tools, each with its ``turns`` (the model's and the tools') and its calls."""
    flat = [(g, i) for g in groups for i in range(len(g.texts))]
    count = len(flat) if count is None else count
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
            **_turns(group.completions[i]),
            **({} if group.observed is None else {"observation": group.observed.observations[i]}),  # reset()'s
        })
    return records


def _turns(completion) -> dict:
    """With tools: the response's turns and its calls (none for a response of a run without tools, or an anchor)."""
    use = completion.tool_use
    if use is None:
        return {}
    return {"turns": [{"role": role, "text": text} for role, text in use.turns], "tool_calls": use.calls,
            "tool_failures": use.failures}


def model_tokens(completion) -> int:
    """The tokens the model wrote (a tool result's are not: rlvr.rollout.tool_loop)."""
    return len(completion.token_ids) if completion.tool_mask is None else sum(completion.tool_mask)


def _extras(group: Group, i: int) -> dict:
    """Response i's ``log_extra`` columns under ``extra`` (none for an anchor: no reward function logged it)."""
    if group.completions[i].is_anchor or not group.reward_extras:
        return {}
    return {"extra": {column: values[i] for column, values in group.reward_extras.items() if i < len(values)}}


def trl_update_metrics(sums: dict[str, float], *, with_kl: bool, loss: float | None, grad_norm: float | None,
                       learning_rate: float, with_policy_loss: bool = False,
                       policy: str = "clip") -> dict[str, float | None]:
    """TRL's training metrics of one step from the update's sums (None where no micro-batch ran). As TRL's log
    leaves a micro-batch's NaN out of the mean, ``clip_ratio/low_min`` / ``high_max`` are averaged over the
    micro-batches that had a row to take them over (None when none had)."""
    count, extremes = sums.get("micro_batches", 0.0), sums.get("clip_extreme_micro", 0.0)
    mean = (lambda key: sums[key] / count) if count else (lambda key: None)
    extreme = (lambda key: sums[key] / extremes) if extremes else (lambda key: None)
    metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": learning_rate, "entropy": mean("entropy_micro")}
    if policy not in UNCLIPPED_LOSSES:
        metrics |= {
            "clip_ratio/low_mean": mean("clip_low_micro"), "clip_ratio/high_mean": mean("clip_high_micro"),
            "clip_ratio/region_mean": mean("clip_region_micro"),
            "clip_ratio/low_min": extreme("clip_low_min_micro"), "clip_ratio/high_max": extreme("clip_high_max_micro"),
        }
    if policy == "cispo":
        metrics["cispo_clip_ratio"] = mean("cispo_clip_micro")
    if policy == "vespo":
        metrics["vespo/phi_seq_mean"] = mean("vespo_phi_micro")
    if with_kl:
        metrics["kl"] = mean("kl_micro")
    if with_policy_loss:  # TRL logs its policy term beside the entropy bonus
        metrics["policy_loss"] = mean("policy_loss_micro")
    return metrics


def trl_rollout_metrics(groups, reward_names: list[str], *, scale_rewards: str) -> dict[str, float | None]:
    """TRL's completion and reward metrics over the step's generated groups (``Group.policy_samples``)."""
    own = [(g, i) for g in groups for i in g.on_policy]
    lengths = [model_tokens(g.completions[i]) for g, i in own]  # (TRL: tool results' tokens not counted)
    ended = [model_tokens(g.completions[i]) for g, i in own if not g.completions[i].truncated]
    scored = [g.rewards[i] for g, i in own if g.is_rewarded(i)]
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
    tools = tool_metrics([g.completions[i] for g, i in own])  # TRL logs its two with tools
    metrics.update({key: tools[key] for key in ("tools/call_frequency", "tools/failure_frequency") if key in tools})
    return metrics


def _std(values: list[float]) -> float | None:
    """torch's unbiased std, as TRL's nanstd: NaN (here None) for fewer than 2 values."""
    return statistics.stdev(values) if len(values) > 1 else None


def _frac_zero_std(groups, scored: list[float], *, batch: bool) -> float | None:
    """Fraction of completions whose reward std is 0 (isclose): their group's, or the batch's (scale_rewards=batch)."""
    counts = []
    for g in groups:
        rewards = [g.rewards[i] for i in g.on_policy if g.is_rewarded(i)]
        spread = _std(scored) if batch else _std(rewards)
        zero = spread is not None and math.isclose(spread, 0.0, abs_tol=1e-8)  # TRL: isclose(nan, 0) is False
        counts += [zero] * len(g.on_policy)
    return statistics.fmean(counts) if counts else None


def trl_train_metrics(sums: dict[str, float], plan, *, loss: float | None, grad_norm: float | None,
                      learning_rate: float | None) -> dict[str, float | None]:
    """:func:`trl_update_metrics` with what the run's StepPlan ``plan`` logs (its KL, entropy bonus, policy loss): of
    a step's update sums here, of a logging interval's in TRL's log (``rlvr.train.trl_log``)."""
    return trl_update_metrics(sums, with_kl=plan.update.needs_reference, loss=loss, grad_norm=grad_norm,
                              learning_rate=learning_rate, with_policy_loss=bonus_on(plan.update),
                              policy=plan.update.loss.policy_loss)


def trl_step_metrics(rollout, update, metrics: dict, *, reward_names, plan, epoch: float,
                     num_tokens: int) -> dict:
    """The step's metrics under TRL's names, as TRL computes them, beside rlvr's ``metrics`` (``rollout``: the
    step's RolloutResult, ``update``: its UpdateResult or None, ``plan``: the StepPlan; ``num_tokens``: the run's
    prompt + completion tokens so far, this step's included)."""
    groups = [g.policy_samples for g in rollout.generated]
    optimizer_steps = update.optimizer_steps + update.skipped_steps if update is not None else 0
    trl = trl_rollout_metrics(groups, reward_names, scale_rewards=plan.advantages.settings.scale_rewards)
    used = update.lr_used if update is not None and update.lr_used is not None else metrics["train/lr"]
    trl |= trl_train_metrics(update.sums if update is not None else {}, plan, loss=metrics["train/loss"],
                             grad_norm=metrics["train/grad_norm"], learning_rate=used)
    trl |= {"num_tokens": float(num_tokens), "epoch": epoch,
            "step_time": metrics["time/step_s"] / max(1, optimizer_steps)}
    if update is not None and update.entropy_coefs:  # after each optimiser step (adaptive: the updated one)
        trl["entropy_coef"] = sum(update.entropy_coefs) / len(update.entropy_coefs)
    if plan.update.is_correction is not None:
        trl |= {f"sampling/{name}": metrics[ours] for name, ours in SAMPLING_METRICS.items()}
    return trl


def step_tokens(rollout) -> int:
    """Prompt + completion tokens of the step's on-policy samples (TRL's num_tokens counts these: of a response with
    tool results, the model's tokens only, as TRL's tool mask counts them)."""
    groups = [g.policy_samples for g in rollout.generated]
    return sum(len(g.generation_prompt(i)) + model_tokens(g.completions[i]) for g in groups for i in g.on_policy)


# The sampler/trainer gap's alarm: a large ``rollout/logprob_mismatch`` (the mean |log π_sampler − log π_trainer|
# over the on-policy pass's tokens) is the signature of a bug, not of noise. A correct engine in the trainer's dtype
# gives ~1e-6 here (rlvr's and the hf engine on CPU); an engine whose log-probs are one position off gave 1.09 in a
# contributor's trial. The usual causes, in the field too: the engine's log-probs of a warped distribution (top_p,
# top_k, min_p, a repetition penalty renormalised into them), another dtype or kernels (bf16 sampling against an fp32
# trainer), weights not synchronised after an update, another prompt or chat template than the trainer scores.
#
# At a step above ``logprob_mismatch_warn`` the run warns, naming the engine and these causes, and logs
# ``rollout/logprob_mismatch_alarm`` = 1 (0 otherwise); above ``max_logprob_mismatch`` it stops with the same text.
# With the importance-sampling correction on, the weights' spread is watched too (under the same switch): a step
# whose correction truncated or masked more than ``IS_ADJUSTED_WARN`` of its tokens (sequence modes: sequences),
# ``rollout/is_clipped_frac``, warns and sets the alarm the same way: a correct sampler's ratios π_old/π_sampler stay
# inside the bounds for almost every unit, so most of them outside is a disagreement, not noise. (A bug that only
# reorders a response's log-probs keeps a sequence's ratio at 1: the mean gap above is what shows it.)
IS_ADJUSTED_WARN = 0.5
CAUSES = ("log-probs of a warped distribution (top_p/top_k/min_p/repetition_penalty renormalised by the engine), "
          "another dtype or kernels than the trainer's, weights not synchronised after an update, or another prompt "
          "or chat template than the trainer scores")


class MismatchAlarm:
    """``check(step, mismatch)`` per step: the metric, a warning, or a stop (module doc)."""

    def __init__(self, limits: tuple[float, float | None], *, engine: str):
        self.warn, self.stop = limits
        self.engine = engine

    def check(self, step: int, mismatch: float | None, is_adjusted: float | None = None) -> dict[str, int]:
        """``mismatch``: the step's rollout/logprob_mismatch; ``is_adjusted``: its rollout/is_clipped_frac (None:
        the correction is off)."""
        if mismatch is None and is_adjusted is None or not self.warn and self.stop is None:
            return {}
        text = (f"step {step}: the sampler's and the trainer's log-probs differ by {mismatch:.3g} nats per token "
                f"(rollout/logprob_mismatch) with rollout_engine={self.engine}; a correct engine in the trainer's "
                f"dtype gives ~1e-6. Usual causes: {CAUSES}") if mismatch is not None else None
        if text is not None and self.stop is not None and mismatch > self.stop:
            raise TrainingStopped(f"{text}. Stopped: max_logprob_mismatch={self.stop} (raise it, or null to go on)")
        alarm = bool(self.warn) and mismatch is not None and mismatch > self.warn
        if alarm:
            logger.warning("%s (logprob_mismatch_warn=%s)", text, self.warn)
        if bool(self.warn) and is_adjusted is not None and is_adjusted > IS_ADJUSTED_WARN:
            alarm = True
            logger.warning("step %d: the importance-sampling correction truncated or masked %.0f%% of its tokens "
                           "(rollout/is_clipped_frac > %s): the sampler's log-probs disagree with the trainer's "
                           "beyond the correction's bounds, with rollout_engine=%s. Usual causes: %s",
                           step, 100 * is_adjusted, IS_ADJUSTED_WARN, self.engine, CAUSES)
        return {"rollout/logprob_mismatch_alarm": int(alarm)}


class StepLog:
    """The step's line of metrics.jsonl: rlvr's names, TRL's beside them, as TRL computes them (built at set-up).

    Args:
        plan: the StepPlan (what the step logs: KL, TA-GRPO's pools, diversity, the IS correction).
        reward_names: the reward functions' logged names.
        grad_spikes: the run's GradSpikes (checkpointed).
        device: the policy's device (memory metrics, the diversity embedder).
        scheduler: the learning-rate schedule (its rate on a step without update).
        epoch: the run's epoch at the end of a step (``RunLength.epoch``).
        with_score: DaGRPO's scoring phase runs (its time is logged).
        length_limits: what was done to long prompts (``length_limits.LengthLimits``) and ``prompts``, the
            PromptBuilder that knows which it cut: the step's :func:`truncation_metrics`.

    ``num_tokens``: the run's prompt + completion tokens so far (TRL's num_tokens; a checkpoint keeps it).
    """

    def __init__(self, plan, *, reward_names, grad_spikes: GradSpikes, device, scheduler, epoch, with_score: bool,
                 length_limits, prompt_builder):
        self.plan, self.reward_names, self.grad_spikes, self.device = plan, reward_names, grad_spikes, device
        self.scheduler, self.epoch, self.with_score = scheduler, epoch, with_score
        self.length_limits, self.prompt_builder = length_limits, prompt_builder
        self.num_tokens = 0
        self.mismatch = MismatchAlarm(plan.logprob_mismatch, engine=plan.engine.name)

    def line(self, step: int, rollout, advantage_metrics: dict, update, timer: PhaseTimer) -> dict:
        """The line of ``step`` (``rollout``: its RolloutResult; ``update``: its UpdateResult or None)."""
        plan = self.plan
        self.num_tokens += step_tokens(rollout)
        train = (update.metrics(with_kl=plan.update.needs_reference) if update is not None
                 else UpdateResult.no_update_metrics(self.scheduler.get_last_lr()[0]))
        metrics = {
            **step_metrics(step, rollout, advantage_metrics, train, reward_names=self.reward_names,
                           tagrpo=plan.tagrpo_metrics, prompt_gap=update.prompt_gap if update else None),
            **self.grad_spikes.update(train["train/grad_norm"]),
            **self.mismatch.check(step, train["rollout/logprob_mismatch"], train["rollout/is_clipped_frac"]),
            **timer.metrics(with_score=self.with_score),
            **memory_metrics(self.device),
            **truncation_metrics(self.length_limits, self.prompt_builder, rollout.generated),
            "perf/tokens_per_s": rollout.generated_tokens / max(timer.seconds["rollout"], 1e-9),
        }
        every, count = plan.diversity_every, plan.diversity_groups
        if every and step % every == 0:
            texts = [[g.policy_samples.texts[i] for i in g.policy_samples.on_policy] for g in rollout.generated[:count]]
            metrics["rollout/diversity"] = group_diversity(texts, device=str(self.device))
        return metrics | trl_step_metrics(rollout, update, metrics, reward_names=self.reward_names, plan=plan,
                                          epoch=self.epoch(step), num_tokens=self.num_tokens)


def truncation_metrics(limits, prompts, generated) -> dict:
    """The step's metric of the length limit (``limits``: length_limits.LengthLimits): prompts dropped (drop), or
    the share of its groups whose prompt was cut (left, ``prompts``: the PromptBuilder)."""
    if limits.truncation == "drop":
        return {"data/prompts_dropped": limits.prompts_dropped}
    if limits.truncation == "left":
        return {"rollout/prompt_truncated_frac": sum(prompts.is_truncated(g.row) for g in generated) / max(1, len(generated))}
    return {}


# sums over a step's micro-batches of each micro-batch's own mean (train/update.py accumulates them)
# (clip_low_min / clip_high_max: over the micro-batches with a row to take them over, clip_extreme_micro of them,
# as TRL's NaN of a micro-batch with none is left out of its logged mean; policy_loss: TRL's, with entropy_coef)
MICRO_MEANS = ("micro_batches", "entropy_micro", "kl_micro", "clip_low_micro", "clip_high_micro",
               "clip_region_micro", "clip_low_min_micro", "clip_high_max_micro", "clip_extreme_micro",
               "policy_loss_micro", "cispo_clip_micro", "vespo_phi_micro")


# per-token sums of a micro-batch, accumulated on the device; summed over ranks at the end. The *_micro ones
# are sums over micro-batches of a micro-batch's own mean, as TRL logs its train metrics (micro_means)
TOKEN_SUMS = ("tokens", "clipped_tokens", "kl_sum", "entropy_sum", "mismatch_sum", "mismatch_tokens",
              "gap_sum", "gap_tokens", "is_ratio_sum", "is_units", "is_tokens", "is_adjusted_tokens",
              "is_weight_sum", "bonus_entropy_sum", "bonus_tokens", *MICRO_MEANS)


# running maxima of a micro-batch (max-reduced over ranks): the IS ratio's max and −min, on the first pass
TOKEN_MAXES = ("is_ratio_max", "is_ratio_neg_min", "is_weight_max", "is_weight_neg_min")


@dataclass
class OptimizerStepLog:
    """One optimiser step as TRL's log counts it (``rlvr.train.trl_log``): its loss, gradient norm and rate, and the
    sums of its micro-batches' statistics (``TOKEN_SUMS``, over every rank)."""

    loss: float
    grad_norm: float
    learning_rate: float
    sums: dict[str, float]


@dataclass
class UpdateResult:
    """What one training step's optimiser steps did: sums, reduced by :meth:`metrics`."""

    lr: float
    lr_used: float | None = None  # the learning rate of the last optimiser step (what transformers logs)
    loss: float = 0.0
    optimizer_steps: int = 0  # taken (finite loss and gradient norm)
    skipped_steps: int = 0
    trailing_skips: int = 0  # skipped since the last optimiser step taken
    grad_norms: list[float] = field(default_factory=list)
    entropy_coefs: list[float] = field(default_factory=list)  # the bonus's coefficient after each optimiser step
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOKEN_SUMS, 0.0))
    maxes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOKEN_MAXES, -math.inf))
    steps: list[OptimizerStepLog] = field(default_factory=list)  # each optimiser step, taken or skipped

    def record_step(self, loss: float, grad_norm: float) -> None:
        """Keep the optimiser step just run: its sums are what it added to :attr:`sums` (this rank's, until
        :meth:`reduce_steps`)."""
        recorded = {name: sum(step.sums[name] for step in self.steps) for name in TOKEN_SUMS}
        self.steps.append(OptimizerStepLog(loss, grad_norm, self.lr_used,
                                           {name: self.sums[name] - recorded[name] for name in TOKEN_SUMS}))

    def reduce_steps(self, ctx: DistContext) -> None:
        """Each optimiser step's sums over the ranks (one collective; every rank ran as many steps)."""
        flat = ctx.sum_floats([step.sums[name] for step in self.steps for name in TOKEN_SUMS])
        for i, step in enumerate(self.steps):
            step.sums = dict(zip(TOKEN_SUMS, flat[i * len(TOKEN_SUMS):(i + 1) * len(TOKEN_SUMS)]))

    @property
    def prompt_gap(self) -> float | None:
        """Mean |log π(o|q_0) − log π(o|q_j)| over responses scored on another prompt than the one they
        were sampled from (TA-GRPO's anchored ratios), on the first pass; None when there are none."""
        return self.sums["gap_sum"] / self.sums["gap_tokens"] if self.sums["gap_tokens"] else None

    def metrics(self, *, with_kl: bool) -> dict[str, float | None]:
        """train/ metrics and the sampler-vs-trainer log-prob mismatch (on the first, on-policy pass)."""
        s, norms = self.sums, self.grad_norms
        return {
            "train/loss": self.loss / max(1, self.optimizer_steps + self.skipped_steps),
            "train/grad_norm": sum(norms) / len(norms) if norms else None,
            "train/grad_norm_max": max(norms) if norms else None,
            "train/clip_frac": s["clipped_tokens"] / max(1.0, s["tokens"]),
            "train/kl": s["kl_sum"] / max(1.0, s["tokens"]) if with_kl else None,
            "train/entropy": s["entropy_sum"] / max(1.0, s["tokens"]),
            "train/lr": self.lr,
            "train/skipped_steps": self.skipped_steps,
            "rollout/logprob_mismatch": s["mismatch_sum"] / s["mismatch_tokens"] if s["mismatch_tokens"] else None,
            # the sampler/trainer IS correction (None when off): the raw ratio π_old/π_sampler before truncation or
            # masking, over the tokens (sequence modes: sequences) it applies to, and the fraction of such tokens
            # whose weight was truncated or masked, over the step's responses once (first pass)
            "rollout/is_ratio_mean": s["is_ratio_sum"] / s["is_units"] if s["is_units"] else None,
            "rollout/is_ratio_min": -self.maxes["is_ratio_neg_min"] if s["is_units"] else None,
            "rollout/is_ratio_max": self.maxes["is_ratio_max"] if s["is_units"] else None,
            "rollout/is_clipped_frac": s["is_adjusted_tokens"] / s["is_tokens"] if s["is_tokens"] else None,
            # the weights themselves (after truncation or masking), as TRL logs sampling/importance_sampling_ratio/*
            "rollout/is_weight_mean": s["is_weight_sum"] / s["is_units"] if s["is_units"] else None,
            "rollout/is_weight_min": -self.maxes["is_weight_neg_min"] if s["is_units"] else None,
            "rollout/is_weight_max": self.maxes["is_weight_max"] if s["is_units"] else None,
        }

    @staticmethod
    def no_update_metrics(lr: float) -> dict[str, float | None]:
        """The train/ metrics of a step that made no update (every group uniform)."""
        keys = ("train/loss", "train/grad_norm", "train/grad_norm_max", "train/clip_frac", "train/kl",
                "train/entropy", "rollout/logprob_mismatch", "rollout/is_ratio_mean", "rollout/is_ratio_min",
                "rollout/is_ratio_max", "rollout/is_clipped_frac", "rollout/is_weight_mean", "rollout/is_weight_min",
                "rollout/is_weight_max")
        return {**dict.fromkeys(keys), "train/lr": lr, "train/skipped_steps": 0}


class Statistics:
    """The update's sums and maxima (``TOKEN_SUMS``, ``TOKEN_MAXES``) and the optimiser step's loss, as float64
    tensors on the device; :meth:`read` brings them to the host in one transfer, once per optimiser step."""

    def __init__(self, result: UpdateResult):
        self.loss = torch.zeros((), dtype=torch.float64)
        self.sums = torch.tensor([result.sums[n] for n in TOKEN_SUMS], dtype=torch.float64)  # running, from the host
        self.maxes = torch.tensor([result.maxes[n] for n in TOKEN_MAXES], dtype=torch.float64)

    def add(self, loss: torch.Tensor, values: dict[str, torch.Tensor]) -> None:
        """One micro-batch: its loss share, and its statistics by name (a name it lacks adds 0 / max-es −inf)."""
        zero = torch.zeros((), dtype=torch.float64, device=loss.device)
        low = torch.tensor(-math.inf, dtype=torch.float64, device=loss.device)
        self.loss = self.loss.to(loss.device) + loss.detach().to(torch.float64)
        self.sums = self.sums.to(loss.device) + torch.stack([values.get(n, zero) for n in TOKEN_SUMS])
        self.maxes = torch.maximum(self.maxes.to(loss.device), torch.stack([values.get(n, low) for n in TOKEN_MAXES]))

    def read(self, grad_norm: torch.Tensor, result: UpdateResult) -> tuple[float, float]:
        """Store the running sums and maxima in ``result``; (this step's loss, ``grad_norm``) on the host."""
        device = self.sums.device
        extra = torch.stack([self.loss.to(device), grad_norm.detach().to(device, torch.float64).reshape(())])
        host = torch.cat([self.sums, self.maxes, extra]).tolist()  # the one host sync of the optimiser step
        result.sums.update(zip(TOKEN_SUMS, host[: len(TOKEN_SUMS)]))
        result.maxes.update(zip(TOKEN_MAXES, host[len(TOKEN_SUMS):-2]))
        return host[-2], host[-1]


def micro_statistics(out: PolicyLoss, x: LossInputs, s: UpdateSettings, *, on_policy: bool,
                     first_pass: bool) -> dict[str, torch.Tensor]:
    """One micro-batch's statistics by ``TOKEN_SUMS``/``TOKEN_MAXES`` name (float64 on the device, no sync)."""
    d = lambda value: value.detach().to(torch.float64)
    anchor = x.is_anchor if x.is_anchor is not None else torch.zeros(len(x.advantages), dtype=torch.bool,
                                                                      device=x.mask.device)
    entropy = x.entropy.detach()
    values = {"tokens": d(x.mask.sum()), "clipped_tokens": d(out.clipped_tokens),
              "entropy_sum": d(entropy[x.mask].sum()),
              **micro_means(out, entropy, x.mask, anchor, sequence_level=s.loss.importance_level == "sequence")}
    if out.kl_sum is not None:
        values["kl_sum"] = d(out.kl_sum)
    values |= variant_statistics(x, s.loss, anchor)
    if s.entropy_control is not None:  # the adaptive bonus's window: the entropy over the bonus's tokens
        bonus = x.bonus_mask & ~anchor.unsqueeze(-1)
        values |= {"bonus_entropy_sum": d(entropy[bonus].sum()), "bonus_tokens": d(bonus.sum())}
    if on_policy:  # sampler vs trainer log-probs; for responses scored on another prompt than the one they
        # were sampled from (TA-GRPO's q_0 vs q_j) the gap |log π(o|q_j) − log π(o|q_0)| instead
        gap = (x.logprobs.detach() - x.sampled).abs()  # [n, T]
        own, moved = x.shown & x.on_own_prompt, x.shown & ~x.on_own_prompt
        values |= {"mismatch_sum": d(gap[own].sum()), "mismatch_tokens": d(own.sum()),
                   "gap_sum": d(gap[moved].sum()), "gap_tokens": d(moved.sum())}
    if x.correction is not None and first_pass:  # the weights are the same on every pass: count each row once
        st = x.correction.stats()
        values |= {"is_ratio_sum": d(st["ratio_sum"]), "is_units": d(st["units"]), "is_tokens": d(st["tokens"]),
                   "is_adjusted_tokens": d(st["adjusted_tokens"]), "is_weight_sum": d(st["weight_sum"]),
                   "is_ratio_max": d(st["ratio_max"]), "is_ratio_neg_min": d(-st["ratio_min"]),
                   "is_weight_max": d(st["weight_max"]), "is_weight_neg_min": d(-st["weight_min"])}
    return values


def variant_statistics(x: LossInputs, s: LossSettings, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
    """TRL's metrics of its other loss types, one micro-batch's mean (float64 on the device): ``cispo_clip_ratio``
    (the capped tokens' fraction; per sequence under GSPO's ratio) and ``vespo/phi_seq_mean`` (the γ-weights'
    mean over the sequences); anchors left out."""
    sampled = x.mask.bool() & ~anchor.unsqueeze(-1)
    if s.policy_loss == "cispo":
        ratio = log_ratio(x.logprobs.detach(), x.old, x.mask, importance_level=s.importance_level).exp()
        adv = x.advantages.unsqueeze(-1) if x.advantages.dim() == 1 else x.advantages
        flags = cispo_clipped(ratio, adv, sampled, s)
        if s.importance_level == "sequence":
            rows = ~anchor
            fraction = flags.any(-1)[rows].double().mean() if bool(rows.any()) else torch.zeros((), device=ratio.device)
        else:
            fraction = flags.sum().double() / sampled.sum().clamp(min=1)
        return {"cispo_clip_micro": fraction.to(torch.float64)}
    if s.policy_loss == "vespo":
        phi = vespo_weights(x.logprobs.detach(), x.old, x.advantages, x.mask, s, x.is_weights)[~anchor]  # [rows, 1]
        return {"vespo_phi_micro": phi.double().mean() if phi.numel() else torch.zeros((), dtype=torch.float64,
                                                                                        device=phi.device)}
    return {}


def bonus_on(s: UpdateSettings) -> bool:
    """TRL's entropy bonus is on: a coefficient, or the adaptive control (which may raise it from 0)."""
    return s.loss.entropy_coef > 0 or s.entropy_control is not None


