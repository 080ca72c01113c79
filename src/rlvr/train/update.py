"""The policy update: μ passes over a rollout batch, mini-batches of whole groups, micro-batches.

Per optimiser step (one mini-batch):

    loss = aggregate(clipped_surrogate(logp, old_logp, A) + β·KL_k3(logp, ref_logp), mode)

accumulated over micro-batches with the *mini-batch's* token and sequence counts as denominators,
so k micro-batches of b give exactly the loss and gradient of one batch of k·b (docs/design/pitfalls.md #6). The
micro-batches hold responses of similar length (``length_buckets``), so little of a forward is padding.

Anchors (DaGRPO's expert responses) replace the clipped term by ψ-weighted log-likelihood:
−Â·ψ(π_θ(a_t)), never clipped (core.losses.anchor_surrogate).

Old log-probs are computed only when the ratio can differ from 1 (μ > 1 or several mini-batches);
otherwise old = logp.detach() and the ratio is exactly 1 on this on-policy pass. Then the loss
reads −mean(A) ≈ 0 on token-mean while the gradient is not 0 (docs/design/pitfalls.md #3).

A step whose loss or gradient norm is not finite is skipped (gradients dropped) and counted.

On W ranks (train/distributed.py) every rank holds the whole batch; each mini-batch's pools are
dealt to the ranks whole, each rank's loss uses the mini-batch's global denominators and is
multiplied by W (DDP and FSDP2 average gradients; the sum is the 1-process gradient), and every
rank runs the same number of micro-batches (a rank with fewer runs zero-loss ones), because each
backward that synchronises gradients is a collective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.config import ExperimentConfig
from rlvr.core.kl import kl_k3
from rlvr.core.losses import aggregate, anchor_surrogate, clipped_surrogate
from rlvr.train.distributed import ALONE, DistContext, gradient_sync, unwrap
from rlvr.train.experience import Experience, length_buckets, minibatches, pad_rows
from rlvr.train.fsdp import full_weights
from rlvr.train.scoring import collate, score, score_no_grad

SUMMED_OVER_RANKS = ("tokens", "clipped_tokens", "kl_sum", "entropy_sum", "mismatch_sum", "mismatch_tokens",
                     "gap_sum", "gap_tokens")


@dataclass
class UpdateStats:
    """Sums over one training step's optimiser steps, reduced by :meth:`summary`."""

    loss: float = 0.0
    optimizer_steps: int = 0
    skipped_steps: int = 0
    trailing_skips: int = 0  # skipped since the last optimiser step taken
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
            "_optimizer_steps": self.optimizer_steps,
            "_trailing_skips": self.trailing_skips,
        }

    def sum_over_ranks(self, ctx: DistContext) -> None:
        """Token-level sums are per rank; loss, steps and grad norms are already global."""
        for name, value in zip(SUMMED_OVER_RANKS, ctx.sum_floats([getattr(self, n) for n in SUMMED_OVER_RANKS])):
            setattr(self, name, value)


def update_policy(
    cfg: ExperimentConfig,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler,
    experience: Experience,
    *,
    pad_token_id: int,
    ref_model=None,
    ctx: DistContext = ALONE,
) -> dict[str, float | None]:
    """Run every optimiser step of one training step; return train/ metrics.

    ``model`` is the policy, or its DDP/FSDP2 wrapping on W ranks (``ctx``).
    """
    algo = cfg.algorithm
    micro = micro_batch_size(cfg, len(experience), world_size=ctx.world_size)
    temperature = cfg.rollout.temperature
    plan = [
        [rank_share(experience.pool_ids, mini, ctx, rank) for rank in range(ctx.world_size)]
        for mini in minibatches(experience.pool_ids, algo.steps_per_generation)
    ]  # per mini-batch: every rank's responses
    mine = sorted({i for shares in plan for i in shares[ctx.rank]})
    with full_weights(unwrap(model)):  # FSDP2: ranks run different numbers of forwards here
        if cfg.needs_old_logprobs:
            experience.old_logprobs = _score_rows(unwrap(model), experience.behaviour_prompt_ids, experience,
                                                  mine, pad_token_id=pad_token_id, temperature=temperature,
                                                  micro=micro)
        if algo.beta > 0:  # (a LoRA reference is the sharded policy with its adapters off)
            experience.ref_logprobs = _score_rows(ref_model, experience.prompt_ids, experience, mine,
                                                  pad_token_id=pad_token_id, temperature=temperature, micro=micro)
    stats = UpdateStats(grad_norms=[])
    for iteration in range(algo.num_iterations):
        for index, shares in enumerate(plan):
            optimizer_step(cfg, model, optimizer, scheduler, experience, shares,
                           micro=micro, pad_token_id=pad_token_id, stats=stats,
                           on_policy=iteration == 0 and index == 0, ctx=ctx)
    stats.sum_over_ranks(ctx)
    return stats.summary(beta=algo.beta, lr=scheduler.get_last_lr()[0])


def rank_share(pool_ids: torch.Tensor, mini: list[int], ctx: DistContext, rank: int) -> list[int]:
    """The responses of ``mini`` that ``rank`` trains on: a contiguous share of its pools (never split)."""
    if not ctx.enabled:
        return mini
    order: dict[int, list[int]] = {}
    for i in mini:
        order.setdefault(int(pool_ids[i]), []).append(i)
    pools = list(order.values())
    return [i for p in ctx.share(len(pools), rank) for i in pools[p]]


def _score_rows(model, prompts, exp: Experience, rows: list[int], *, pad_token_id: int, temperature: float,
                micro: int) -> list[torch.Tensor | None]:
    """No-grad log-probs for the responses ``rows`` (this rank's); None for the others."""
    scored = score_no_grad(model, [prompts[i] for i in rows], [exp.response_ids[i] for i in rows],
                           pad_token_id=pad_token_id, temperature=temperature, micro_batch_size=micro)
    out: list[torch.Tensor | None] = [None] * len(exp)
    for i, logprobs in zip(rows, scored):
        out[i] = logprobs
    return out


def _ratio_cap(cfg: ExperimentConfig) -> float | None:
    t = cfg.tagrpo
    return t.truncated_is_cap if t.enabled and t.ratio_anchor == "truncated_is" else None


def micro_batch_size(cfg: ExperimentConfig, num_responses: int, *, world_size: int = 1) -> int:
    """Responses per forward/backward pass, from per_device_train_batch_size or accumulation steps."""
    mini = math.ceil(num_responses / cfg.algorithm.steps_per_generation / world_size)  # per rank
    if cfg.optim.per_device_train_batch_size is not None:
        return cfg.optim.per_device_train_batch_size
    if cfg.optim.gradient_accumulation_steps is not None:
        return math.ceil(mini / cfg.optim.gradient_accumulation_steps)
    return mini


def optimizer_step(
    cfg: ExperimentConfig,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler,
    exp: Experience,
    shares: list[list[int]],
    *,
    micro: int,
    pad_token_id: int,
    stats: UpdateStats,
    on_policy: bool,
    ctx: DistContext = ALONE,
) -> None:
    """One optimiser step over one mini-batch: ``shares[r]`` are rank r's responses of it."""
    algo = cfg.algorithm
    keep = ~exp.truncated if algo.mask_truncated_completions else torch.ones_like(exp.truncated)
    mini = [i for share in shares for i in share]
    num_tokens = float(sum(len(exp.response_ids[i]) for i in mini if keep[i]))  # global denominators
    plans = [length_buckets(share, [len(exp.response_ids[i]) for i in share], micro) for share in shares]
    buckets = plans[ctx.rank]
    count = max(len(p) for p in plans)  # every rank runs as many micro-batches (collective backward)
    loss_total = 0.0
    for k in range(count):
        with gradient_sync(model, enabled=k == count - 1):
            if k >= len(buckets):
                _zero_loss_pass(model, pad_token_id)
                continue
            loss_total += _micro_batch(cfg, model, exp, buckets[k], keep, num_tokens=num_tokens,
                                       num_sequences=len(mini), pad_token_id=pad_token_id, stats=stats,
                                       on_policy=on_policy, scale=ctx.world_size)
    loss_total = ctx.sum_floats([loss_total])[0]
    params = [p for p in model.parameters() if p.requires_grad]
    max_norm = cfg.optim.max_grad_norm if cfg.optim.max_grad_norm > 0 else math.inf
    grad_norm = _float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    stats.loss += loss_total
    if math.isfinite(grad_norm) and math.isfinite(loss_total):
        optimizer.step()
        stats.optimizer_steps += 1
        stats.trailing_skips = 0
        stats.grad_norms.append(grad_norm)
    else:
        stats.skipped_steps += 1
        stats.trailing_skips += 1
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def _micro_batch(cfg: ExperimentConfig, model, exp: Experience, rows: list[int], keep: torch.Tensor, *,
                 num_tokens: float, num_sequences: int, pad_token_id: int, stats: UpdateStats, on_policy: bool,
                 scale: int) -> float:
    """Forward and backward of one micro-batch; returns its (unscaled) share of the mini-batch loss."""
    algo = cfg.algorithm
    batch = collate([exp.prompt_ids[i] for i in rows], [exp.response_ids[i] for i in rows],
                    pad_token_id=pad_token_id)
    mask = batch.response_mask & keep[rows].unsqueeze(-1)  # [n, T]
    width = batch.response_width
    logprobs, entropy = score(model, batch, temperature=cfg.rollout.temperature, with_entropy=True)
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
    loss = aggregate(per_token, mask, algo.aggregation, max_completion_length=cfg.rollout.max_completion_length,
                     num_tokens=num_tokens, num_sequences=num_sequences)
    (loss * scale if scale != 1 else loss).backward()  # DDP/FSDP average over ranks: scale to a sum
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
    return float(loss.detach())


def _zero_loss_pass(model, pad_token_id: int) -> None:
    """A one-token forward/backward with loss 0: takes part in the gradient collectives, adds nothing."""
    batch = collate([[pad_token_id]], [[pad_token_id]], pad_token_id=pad_token_id)
    logprobs, _ = score(model, batch, temperature=1.0)
    (logprobs.sum() * 0.0).backward()


def _float(value) -> float:
    """A Python float from a tensor or DTensor (FSDP2's clip_grad_norm_ returns a DTensor)."""
    if hasattr(value, "full_tensor"):
        value = value.full_tensor()
    return float(value)
