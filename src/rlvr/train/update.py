"""The policy update: μ passes over a rollout batch, mini-batches of whole groups, micro-batches.

Per optimiser step (one mini-batch):

    loss = aggregate(clipped_surrogate(logp, old_logp, A) + β·KL_k3(logp, ref_logp), mode)

accumulated over micro-batches with the *mini-batch's* token and sequence counts as denominators,
so k micro-batches of b give exactly the loss and gradient of one batch of k·b (USERS.md #6). The
micro-batches hold responses of similar length (``length_buckets``), so little of a forward is padding.

Anchors (DaGRPO's expert responses) replace the clipped term by ψ-weighted log-likelihood:
−Â·ψ(π_θ(a_t)), never clipped (core.losses.anchor_surrogate).

Old log-probs are computed only when the ratio can differ from 1 (μ > 1 or several mini-batches);
otherwise old = logp.detach() and the ratio is exactly 1 on this on-policy pass. Then the loss
reads −mean(A) ≈ 0 on token-mean while the gradient is not 0 (USERS.md #3).

A step whose loss or gradient norm is not finite is skipped (gradients dropped) and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.config import ExperimentConfig
from rlvr.core.kl import kl_k3
from rlvr.core.losses import aggregate, anchor_surrogate, clipped_surrogate
from rlvr.train.experience import Experience, length_buckets, minibatches, pad_rows
from rlvr.train.scoring import collate, score, score_no_grad


@dataclass
class UpdateStats:
    """Sums over one training step's optimiser steps, reduced by :meth:`summary`."""

    loss: float = 0.0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    grad_norms: list[float] | None = None
    tokens: float = 0.0
    clipped_tokens: float = 0.0
    kl_sum: float = 0.0
    entropy_sum: float = 0.0
    mismatch_sum: float = 0.0
    mismatch_tokens: float = 0.0
    gap_sum: float = 0.0
    gap_tokens: float = 0.0

    def summary(self, *, beta: float, lr: float) -> dict[str, float | None]:
        norms = self.grad_norms or []
        return {
            "train/loss": self.loss / max(1, self.optimizer_steps + self.skipped_steps),
            "train/grad_norm": sum(norms) / len(norms) if norms else None,
            "train/grad_norm_max": max(norms) if norms else None,
            "train/clip_frac": self.clipped_tokens / max(1.0, self.tokens),
            "train/kl": self.kl_sum / max(1.0, self.tokens) if beta > 0 else None,
            "train/entropy": self.entropy_sum / max(1.0, self.tokens),
            "train/lr": lr,
            "train/skipped_steps": self.skipped_steps,
            "rollout/logprob_mismatch": (
                self.mismatch_sum / self.mismatch_tokens if self.mismatch_tokens else None
            ),
            "tagrpo/anchor_logp_gap": self.gap_sum / self.gap_tokens if self.gap_tokens else None,
        }


def update_policy(
    cfg: ExperimentConfig,
    policy,
    optimizer: torch.optim.Optimizer,
    scheduler,
    experience: Experience,
    *,
    pad_token_id: int,
    ref_model=None,
) -> dict[str, float | None]:
    """Run every optimiser step of one training step; return train/ metrics."""
    algo = cfg.algorithm
    micro = micro_batch_size(cfg, len(experience))
    temperature = cfg.rollout.temperature
    if cfg.needs_old_logprobs:
        experience.old_logprobs = score_no_grad(
            policy, experience.behaviour_prompt_ids, experience.response_ids,
            pad_token_id=pad_token_id, temperature=temperature, micro_batch_size=micro,
        )
    if algo.beta > 0:
        experience.ref_logprobs = score_no_grad(
            ref_model, experience.prompt_ids, experience.response_ids,
            pad_token_id=pad_token_id, temperature=temperature, micro_batch_size=micro,
        )
    stats = UpdateStats(grad_norms=[])
    for iteration in range(algo.num_iterations):
        for index, mini in enumerate(minibatches(experience.pool_ids, algo.steps_per_generation)):
            on_policy = iteration == 0 and index == 0
            optimizer_step(cfg, policy, optimizer, scheduler, experience, mini,
                           micro=micro, pad_token_id=pad_token_id, stats=stats, on_policy=on_policy)
    return stats.summary(beta=algo.beta, lr=scheduler.get_last_lr()[0])


def _ratio_cap(cfg: ExperimentConfig) -> float | None:
    t = cfg.tagrpo
    return t.truncated_is_cap if t.enabled and t.ratio_anchor == "truncated_is" else None


def micro_batch_size(cfg: ExperimentConfig, num_responses: int) -> int:
    """Responses per forward/backward pass, from per_device_train_batch_size or accumulation steps."""
    mini = math.ceil(num_responses / cfg.algorithm.steps_per_generation)
    if cfg.optim.per_device_train_batch_size is not None:
        return cfg.optim.per_device_train_batch_size
    if cfg.optim.gradient_accumulation_steps is not None:
        return math.ceil(mini / cfg.optim.gradient_accumulation_steps)
    return mini


def optimizer_step(
    cfg: ExperimentConfig,
    policy,
    optimizer: torch.optim.Optimizer,
    scheduler,
    exp: Experience,
    mini: list[int],
    *,
    micro: int,
    pad_token_id: int,
    stats: UpdateStats,
    on_policy: bool,
) -> None:
    """One optimiser step over the responses ``mini`` (accumulated in micro-batches)."""
    algo = cfg.algorithm
    keep = ~exp.truncated if algo.mask_truncated_completions else torch.ones_like(exp.truncated)
    num_tokens = float(sum(len(exp.response_ids[i]) for i in mini if keep[i]))
    loss_total = 0.0
    for rows in length_buckets(mini, [len(exp.response_ids[i]) for i in mini], micro):
        batch = collate([exp.prompt_ids[i] for i in rows], [exp.response_ids[i] for i in rows],
                        pad_token_id=pad_token_id)
        mask = batch.response_mask & keep[rows].unsqueeze(-1)  # [n, T]
        width = batch.response_width
        logprobs, entropy = score(policy, batch, temperature=cfg.rollout.temperature, with_entropy=True)
        old = pad_rows([exp.old_logprobs[i] for i in rows], width) if exp.old_logprobs else logprobs.detach()
        per_token, clipped = clipped_surrogate(
            logprobs, old, exp.advantages[rows], mask,
            epsilon=algo.epsilon, epsilon_high=algo.epsilon_high, dual_clip=algo.dual_clip,
            importance_level=algo.importance_sampling_level, ratio_cap=_ratio_cap(cfg),
        )  # [n, T]
        anchor = exp.is_anchor[rows].unsqueeze(-1)  # [n, 1]: expert tokens, no ratio, never clipped
        if bool(anchor.any()):
            anchor_loss = anchor_surrogate(logprobs, exp.advantages[rows], mask,
                                           psi=cfg.dagrpo.anchor_psi, gamma=cfg.dagrpo.anchor_gamma)
            per_token = torch.where(anchor, anchor_loss, per_token)
            clipped = clipped & ~anchor
        if algo.beta > 0:
            kl = kl_k3(logprobs, pad_rows([exp.ref_logprobs[i] for i in rows], width), mask)  # [n, T]
            per_token = per_token + algo.beta * kl
            stats.kl_sum += float(kl.detach()[mask].sum())
        loss = aggregate(per_token, mask, algo.aggregation,
                         max_completion_length=cfg.rollout.max_completion_length,
                         num_tokens=num_tokens, num_sequences=len(mini))
        loss.backward()
        loss_total += float(loss.detach())
        stats.tokens += float(mask.sum())
        stats.clipped_tokens += float(clipped.sum())
        stats.entropy_sum += float(entropy[mask].sum())
        if on_policy:  # sampler vs trainer log-probs; for rephrased responses scored on q_0 that is
            # TA-GRPO's anchor gap |log π(o|q_j) − log π(o|q_0)| instead of the numerical mismatch
            sampled = pad_rows([torch.tensor(exp.sampling_logprobs[i]) for i in rows], width)
            gap = (logprobs.detach() - sampled).abs()  # [n, T]
            same_prompt = exp.on_own_prompt[rows]  # [n]
            own = batch.response_mask & ~anchor & same_prompt.unsqueeze(-1)
            moved = batch.response_mask & ~anchor & ~same_prompt.unsqueeze(-1)
            stats.mismatch_sum += float(gap[own].sum())
            stats.mismatch_tokens += float(own.sum())
            stats.gap_sum += float(gap[moved].sum())
            stats.gap_tokens += float(moved.sum())
    params = [p for p in policy.parameters() if p.requires_grad]
    max_norm = cfg.optim.max_grad_norm if cfg.optim.max_grad_norm > 0 else math.inf
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    stats.loss += loss_total
    if math.isfinite(grad_norm) and math.isfinite(loss_total):
        optimizer.step()
        stats.optimizer_steps += 1
        stats.grad_norms.append(grad_norm)
    else:
        stats.skipped_steps += 1
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
