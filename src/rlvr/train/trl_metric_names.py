"""TRL's metric names: what each is and rlvr's nearest metric (:data:`TRL_METRICS`, docs/from_trl.md's table), and the
name TRL's ``Trainer.log`` gives each series rlvr logs (:func:`trl_log_name`; the trackers' tags come from it).
The values under those names are computed in rlvr.train.metrics."""

from __future__ import annotations

from rlvr.train.rewarding import LOGGED_METRIC_PREFIX

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
    "tools/call_frequency": ("tool calls per completion (with tools)", "tools/call_frequency"),
    "tools/failure_frequency": ("failed tool calls per tool call", "tools/failure_frequency"),
    "num_tokens": ("prompt + completion tokens seen so far", "-"),
    "entropy": ("policy entropy on the trained tokens, micro-batch means averaged", "train/entropy"),
    "kl": ("k3 KL to the reference (x ratio with use_bias_correction_kl), micro-batch means averaged; beta > 0",
           "train/kl"),
    "clip_ratio/low_mean": ("tokens with ratio < 1 - epsilon and A < 0", "-"),
    "clip_ratio/high_mean": ("tokens with ratio > 1 + epsilon_high and A > 0", "-"),
    "clip_ratio/region_mean": ("either", "train/clip_frac"),
    "clip_ratio/low_min": ("the least low-clipped sequence's fraction (micro-batches with no trained row left out)",
                           "-"),
    "clip_ratio/high_max": ("the most high-clipped sequence's fraction (the same micro-batches)", "-"),
    "loss": ("the optimiser step's loss, averaged over the step's", "train/loss"),
    "grad_norm": ("gradient norm before clipping, averaged over the step's optimiser steps", "train/grad_norm"),
    "learning_rate": ("the rate of the step's last optimiser step, as transformers logs it (rlvr's: after it)",
                      "train/lr"),
    "epoch": ("optimiser steps / optimiser steps per epoch", "-"),
    "step_time": ("seconds per optimiser step (the step's time / its optimiser steps)", "time/step_s"),
    "entropy_coef": (("the entropy bonus coefficient after each optimiser step (entropy_coef > 0 or "
                      "use_adaptive_entropy: the adaptive one)"), "-"),
    "policy_loss": ("the policy term before the entropy bonus, micro-batch values averaged (the bonus on)", "-"),
    "cispo_clip_ratio": ("loss_type=cispo: tokens whose ratio the cap epsilon_high cut (A > 0); no clip_ratio/*", "-"),
    "vespo/phi_seq_mean": ("loss_type=vespo: the mean gamma-weight phi(w) over the sequences; no clip_ratio/*", "-"),
    "sampling/sampling_logp_difference/mean": (("mean absolute difference of the trainer's and the sampler's "
                                               "log-probs (the vLLM correction on)"), "rollout/logprob_mismatch"),
    "sampling/importance_sampling_ratio/min": ("the correction's weight (after truncation or masking), min",
                                               "rollout/is_weight_min"),
    "sampling/importance_sampling_ratio/mean": ("its mean", "rollout/is_weight_mean"),
    "sampling/importance_sampling_ratio/max": ("its max", "rollout/is_weight_max"),
}


# transformers' end-of-training entry (Trainer._finalize_training), TRL's last (rlvr.train.trl_log)
TRL_SUMMARY = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss",
               "epoch")


def trl_log_name(key: str) -> str | None:
    """The name TRL's ``Trainer.log`` gives the series metrics.jsonl holds under ``key``; None: an rlvr series.

    TRL's names (:data:`TRL_METRICS`, ``rewards/<f>/mean|std``, :data:`TRL_SUMMARY`) are their own; rlvr's evaluation
    ``eval/<x>`` is logged as transformers logs evaluation, ``eval_<x>``; a reward function's ``log_metric(name, v)``
    (``reward_fn/<name>``) under ``name``, as TRL logs it, unless that is one of TRL's own names.
    The trackers make their tags from it (rlvr.run.trackers: ``train/<name>``, ``eval/<x>``, rlvr's under ``rlvr/``).
    """
    if _is_trl_name(key):
        return key
    if key.startswith("eval/"):
        return "eval_" + key.removeprefix("eval/")
    if key.startswith(LOGGED_METRIC_PREFIX) and not _is_trl_name(key.removeprefix(LOGGED_METRIC_PREFIX)):
        return key.removeprefix(LOGGED_METRIC_PREFIX)
    return None


def _is_trl_name(key: str) -> bool:
    parts = key.split("/")
    return (key in TRL_METRICS or key in TRL_SUMMARY
            or (len(parts) == 3 and parts[0] == "rewards" and parts[2] in ("mean", "std")))  # rewards/<f>/mean


def metrics_table() -> str:
    """docs/from_trl.md's table of TRL's metric names, generated from :data:`TRL_METRICS` (a test keeps the
    page equal to it)."""
    rows = [f"| `{name}` | {what} | {'`' + ours + '`' if ours != '-' else '—'} |" for name, (what, ours) in
            TRL_METRICS.items()]
    return "\n".join(["| TRL's name (metrics.jsonl, trackers, trainer_state.json) | what it is | rlvr's own name |",
                      "|---|---|---|", *rows])


# TRL's sampling/ metrics (the vLLM importance-sampling correction) <- rlvr's
SAMPLING_METRICS = {
    "sampling_logp_difference/mean": "rollout/logprob_mismatch",
    "importance_sampling_ratio/min": "rollout/is_weight_min",  # TRL logs the weights, after truncation/masking
    "importance_sampling_ratio/mean": "rollout/is_weight_mean",
    "importance_sampling_ratio/max": "rollout/is_weight_max",
}


# policy losses without PPO's clip: TRL logs no clip_ratio/* for them (its loss types sapo, vespo, cispo)
UNCLIPPED_LOSSES = frozenset({"cispo", "sapo", "vespo", "kl_cov"})
