"""The policy update: μ passes over a rollout batch, mini-batches of whole groups, micro-batches.

Per optimiser step (one mini-batch):

    loss = aggregate(policy_loss(logp, old_logp, A, mask, settings, ...), settings.aggregation)   (rlvr.core.losses)

accumulated over micro-batches with the *mini-batch's* token and sequence counts as denominators,
so k micro-batches of b give exactly the loss and gradient of one batch of k·b (docs/design/pitfalls.md #6). The
micro-batches hold responses of similar length (``length_buckets``), so little of a forward is padding.

Anchor rows (expert responses) take −Â·ψ(π_θ(a_t)) instead of the clipped term, never clipped.
With ``entropy_coef`` c > 0 each micro-batch's loss also gets −c × its sampled tokens' mean entropy × its
share of the optimiser step (TRL's bonus, ``rlvr.core.losses.entropy_bonus``; the entropy then keeps its
gradient: one more [n, T, V] softmax kept for the backward on the plain-logits path).
The settings come from ``plan.UpdateSettings``; this module knows no algorithm by name. A micro-batch's
loss inputs are built in one place (:meth:`PolicyUpdate.loss_inputs`: the forward, old/reference log-probs,
importance weights) and its statistics go to one accumulator (:class:`Statistics`).

Old log-probs are computed only when the ratio can differ from 1 (μ > 1 or several mini-batches);
otherwise old = logp.detach() and the ratio is exactly 1 on this on-policy pass. Then the loss
reads −mean(A) ≈ 0 on token-mean while the gradient is not 0 (docs/design/pitfalls.md #3).

With the sampler/trainer importance-sampling correction (``UpdateSettings.is_correction``, TRL's
``vllm_importance_sampling_correction``) each sampled token's clipped term is also weighted by the
detached w_t of ``rlvr.core.importance`` (π_old / π_sampler, truncated or masked), the same on every
pass; anchors get w = 1; the KL and entropy terms are not weighted (as in TRL).

A step whose loss or gradient norm is not finite is skipped (gradients dropped) and counted.
Statistics stay on the device during an optimiser step and reach the host once per step.

On W ranks (parallel/runtime.py) every rank holds the whole batch; each mini-batch's pools are
dealt to the ranks whole, each rank's loss uses the mini-batch's global denominators and is
multiplied by W (DDP and FSDP2 average gradients; the sum is the 1-process gradient), and every
rank runs the same number of micro-batches (a rank with fewer runs zero-loss ones), because each
backward that synchronises gradients is a collective.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlvr.core.entropy_control import EntropyController
from rlvr.core.importance import ISWeights, importance_weights
from rlvr.core.loss_variants import cispo_clipped, high_entropy_mask, off_policy_mask, vespo_weights
from rlvr.core.losses import LossSettings, PolicyLoss, aggregate, entropy_bonus, log_ratio, policy_loss
from rlvr.parallel.runtime import ALONE, DistContext, autocast, full_weights, gradient_sync, unwrap
from rlvr.train.experience import Experience, length_buckets, minibatches, pad_rows
from rlvr.train.plan import UpdateSettings
from rlvr.train.response_logprobs import collate, response_logprobs, response_logprobs_no_grad

ENTROPY_STATE = "entropy_ctrl_state.json"  # TRL's file: the adaptive entropy control's coefficient and last entropy
# sync_ref_model: the reference moves with the policy (not *.safetensors: those are the policy's weights)
REFERENCE_WEIGHTS = "reference_model.pt"

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


@dataclass
class LossInputs:
    """One micro-batch's inputs to the loss, on the device ([n, T] per token, [n] per response)."""

    logprobs: torch.Tensor  # log π_θ (with grad)
    entropy: torch.Tensor  # H(π_θ) per position (with grad when entropy_coef > 0)
    old: torch.Tensor  # log π_old (logprobs.detach() when not computed)
    ref: torch.Tensor | None  # log π_ref (None: β = 0)
    advantages: torch.Tensor  # [n]
    mask: torch.Tensor  # the tokens trained on
    is_anchor: torch.Tensor | None  # [n] (None: no anchor in the micro-batch, and no anchor term)
    is_weights: torch.Tensor | None  # the IS correction's w_t (anchors 1; None: off)
    keep: torch.Tensor | None  # [n, T] or [n, 1] the policy term's tokens kept (TRL's off-policy and entropy masks)
    bonus_mask: torch.Tensor  # the tokens of the entropy bonus (TRL: the mask and top_entropy_quantile's)
    correction: ISWeights | None  # the IS correction's weights and statistics (None: off)
    sampled: torch.Tensor | None  # the sampler's log-probs (on the on-policy pass, or with the correction)
    shown: torch.Tensor  # every response token, anchors excluded
    on_own_prompt: torch.Tensor  # [n, 1] scored on the prompt it was sampled from


class PolicyUpdate:
    """Runs every optimiser step of one training step (μ passes × mini-batches × micro-batches).

    ``model`` is the policy, or its DDP/FSDP2 wrapping on W ranks (``ctx``); ``ref_model`` the
    reference policy when β > 0.
    """

    def __init__(self, settings: UpdateSettings, model, optimizer: torch.optim.Optimizer, scheduler, *,
                 pad_token_id: int, ref_model=None, ctx: DistContext = ALONE, max_optimizer_steps: int | None = None):
        """``max_optimizer_steps``: the run's optimiser steps; none is taken past them (the scheduler counts
        the steps taken, so a resumed run stops where an uninterrupted one does), as TRL stops inside its
        last generation batch (None: no limit)."""
        self.s = settings
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.pad_token_id, self.ref_model, self.ctx = pad_token_id, ref_model, ctx
        self.max_optimizer_steps = max_optimizer_steps
        control = settings.entropy_control
        self.entropy = EntropyController(control) if control is not None else None  # (a checkpoint's state)

    def __call__(self, exp: Experience, advantages: torch.Tensor) -> UpdateResult:
        """Update the policy on ``exp`` with ``advantages`` [N]; neither is changed."""
        s, ctx = self.s, self.ctx
        micro = s.per_device_train_batch_size
        plan = [
            [rank_share(exp.pool_ids, mini, ctx, rank) for rank in range(ctx.world_size)]
            for mini in minibatches(exp.pool_ids, s.num_minibatches)
        ]  # per mini-batch: every rank's responses
        mine = sorted({i for shares in plan for i in shares[ctx.rank]})
        old, ref, sampled_old = self._no_grad_passes(exp, mine, micro)
        result = UpdateResult(lr=0.0)
        for iteration in range(s.num_iterations):
            for index, shares in enumerate(plan):
                if self._run_is_done():
                    break
                batch = OptimizerBatch(exp, advantages, old, ref, shares, sampled_old=sampled_old)
                self.optimizer_step(batch, micro=micro, result=result, on_policy=iteration == 0 and index == 0,
                                    first_pass=iteration == 0)
        for name, value in zip(TOKEN_SUMS, ctx.sum_floats([result.sums[n] for n in TOKEN_SUMS])):
            result.sums[name] = value  # token sums are per rank; loss, steps and grad norms already global
        if ctx.enabled:
            result.reduce_steps(ctx)
        if s.is_correction is not None:  # (every rank has the same settings: the collective is on all or none)
            result.maxes = dict(zip(TOKEN_MAXES, ctx.max_floats([result.maxes[n] for n in TOKEN_MAXES])))
        result.lr = self.scheduler.get_last_lr()[0]
        return result

    def _no_grad_passes(self, exp: Experience, mine: list[int], micro: int):
        """The no-grad log-probs of this rank's responses: old (when the ratio can differ from 1), reference
        (β > 0), and the IS correction's numerator where old is scored on another prompt (None where not needed)."""
        old = ref = None
        with full_weights(unwrap(self.model)):  # FSDP2: ranks run different numbers of forwards here
            if self.s.needs_old_logprobs:
                old = self._logprobs(unwrap(self.model), exp.behaviour_prompt_ids, exp, mine, micro)
            if self.s.needs_reference:  # (a LoRA reference is the sharded policy with its adapters off)
                ref = self._logprobs(self.ref_model, exp.reference_prompt_ids, exp, mine, micro)
            sampled_old = self._sampled_old(exp, mine, micro, old_computed=old is not None)
        return old, ref, sampled_old

    def write_state(self, folder: Path) -> None:
        """What a checkpoint keeps of the update beyond the optimiser: the adaptive entropy control's state (TRL's
        entropy_ctrl_state.json) and, with sync_ref_model, the reference's weights (reference_model.pt)."""
        if self.entropy is not None:
            (folder / ENTROPY_STATE).write_text(json.dumps(self.entropy.state_dict()), encoding="utf-8")
        if self.s.ref_sync is not None and self.ref_model is not None:
            torch.save(self.ref_model.state_dict(), folder / REFERENCE_WEIGHTS)

    def read_state(self, folder: Path) -> None:
        """:meth:`write_state`'s files of a checkpoint, where present (TRL's checkpoints hold no reference)."""
        if self.entropy is not None and (folder / ENTROPY_STATE).is_file():
            self.entropy.load_state_dict(json.loads((folder / ENTROPY_STATE).read_text(encoding="utf-8")))
        if self.s.ref_sync is not None and self.ref_model is not None and (folder / REFERENCE_WEIGHTS).is_file():
            state = torch.load(folder / REFERENCE_WEIGHTS, map_location=_device(self.ref_model), weights_only=True)
            self.ref_model.load_state_dict(state)

    def _run_is_done(self) -> bool:
        """The run's optimiser steps are all taken (the scheduler's count: every step taken or skipped)."""
        done = getattr(self.scheduler, "last_epoch", None)
        return self.max_optimizer_steps is not None and done is not None and done >= self.max_optimizer_steps

    def _logprobs(self, model, prompts, exp: Experience, rows: list[int], micro: int) -> list[torch.Tensor | None]:
        """No-grad log-probs for the responses ``rows`` (this rank's); None for the others."""
        with autocast(_device(model), self.s.autocast):
            scored = response_logprobs_no_grad(model, [prompts[i] for i in rows], [exp.response_ids[i] for i in rows],
                                   pad_token_id=self.pad_token_id, temperature=self.s.temperature,
                                   micro_batch_size=micro, head_chunk=self.s.head_chunk,
                                   max_tokens=self.s.max_tokens_per_micro_batch)
        out: list[torch.Tensor | None] = [None] * len(exp)
        for i, logprobs in zip(rows, scored):
            out[i] = logprobs
        return out

    def _sampled_old(self, exp: Experience, rows: list[int], micro: int, *,
                     old_computed: bool) -> list[torch.Tensor | None] | None:
        """The IS correction's numerator log π_old(o | the prompt o was sampled from), for the responses of
        ``rows`` whose old log-probs are scored on another prompt (TA-GRPO: sampled from q_j, old scored on
        q_0); None for the others, or in all when there are none (or the correction is off).

        Old log-probs are scored on ``behaviour_prompt_ids`` (SAMPLED under ``truncated_is`` and
        ``unanchored``: usable as they are), or, when not computed, are the policy's on ``prompt_ids``."""
        if self.s.is_correction is None:
            return None
        scored_on = exp.behaviour_prompt_ids if old_computed else exp.prompt_ids
        moved = [i for i in rows if not exp.is_anchor[i] and scored_on[i] != exp.sampled_prompt_ids[i]]
        if not moved:
            return None
        return self._logprobs(unwrap(self.model), exp.sampled_prompt_ids, exp, moved, micro)

    def optimizer_step(self, batch: OptimizerBatch, *, micro: int, result: UpdateResult, on_policy: bool,
                       first_pass: bool = False) -> None:
        """One optimiser step over one mini-batch: ``batch.shares[r]`` are rank r's responses of it.

        ``on_policy``: the first step of the first pass (the sampler-vs-trainer mismatch is measured on it);
        ``first_pass``: a step of the first pass (the IS correction's statistics: each response once)."""
        s, ctx, exp = self.s, self.ctx, batch.exp
        keep = ~exp.truncated if s.mask_truncated else torch.ones_like(exp.truncated)
        mini = [i for share in batch.shares for i in share]
        # global denominators: the mini-batch's tokens; TRL's dapo: the step's tokens / optimiser steps per pass
        counted = range(len(exp)) if s.loss.aggregation == "dapo" else mini
        num_tokens = float(sum(exp.model_tokens(i) for i in counted if keep[i]))  # (tool results: not trained)
        if s.loss.aggregation == "dapo":
            num_tokens /= s.num_minibatches
        plans = [length_buckets(share, [len(exp.response_ids[i]) for i in share], micro,
                                max_tokens=s.max_tokens_per_micro_batch) for share in batch.shares]
        buckets = plans[ctx.rank]
        count = max(len(p) for p in plans)  # every rank runs as many micro-batches (collective backward)
        stats = Statistics(result)
        before = (result.sums["bonus_entropy_sum"], result.sums["bonus_tokens"])
        for k in range(count):
            with gradient_sync(self.model, enabled=k == count - 1):
                if k >= len(buckets):
                    if s.loss.top_entropy_quantile < 1 and ctx.enabled:  # the quantile's gather is collective
                        ctx.gather_objects([])
                    _zero_loss_pass(self.model, self.pad_token_id)
                    continue
                inputs = self.loss_inputs(batch, buckets[k], keep, on_policy=on_policy)
                loss, out, policy = self.loss(inputs, num_tokens=num_tokens, num_sequences=len(mini))
                (loss * ctx.world_size if ctx.world_size != 1 else loss).backward()  # DDP/FSDP average: to a sum
                stats.add(loss, {**micro_statistics(out, inputs, s, on_policy=on_policy, first_pass=first_pass),
                                 **({"policy_loss_micro": policy} if policy is not None else {})})
        params = [p for p in self.model.parameters() if p.requires_grad]
        max_norm = s.max_grad_norm if s.max_grad_norm > 0 else math.inf
        loss, grad_norm = stats.read(_full(torch.nn.utils.clip_grad_norm_(params, max_norm)), result)
        self._apply(ctx.sum_floats([loss])[0], grad_norm, result)
        self._entropy_after_step(result, before)

    def _entropy_after_step(self, result: UpdateResult, before: tuple[float, float]) -> None:
        """TRL's adaptive bonus: the step's entropy over the bonus's tokens (``before``: the running sums before the
        step; every rank's) moves the coefficient; the coefficient after the step is logged (TRL's entropy_coef)."""
        if self.entropy is not None:
            window = [result.sums["bonus_entropy_sum"] - before[0], result.sums["bonus_tokens"] - before[1]]
            self.entropy.step(*self.ctx.sum_floats(window))
        if bonus_on(self.s):
            result.entropy_coefs.append(self.entropy.coef if self.entropy is not None else self.s.loss.entropy_coef)

    def _apply(self, loss: float, grad_norm: float, result: UpdateResult) -> None:
        """Take the optimiser step when the loss and gradient norm are finite (else skip it and count), and move
        the schedule on."""
        result.loss += loss
        if math.isfinite(grad_norm) and math.isfinite(loss):
            self.optimizer.step()
            result.optimizer_steps += 1
            result.trailing_skips = 0
            result.grad_norms.append(grad_norm)
        else:
            result.skipped_steps += 1
            result.trailing_skips += 1
        result.lr_used = self.scheduler.get_last_lr()[0]  # before the schedule moves on: this step's rate
        result.record_step(loss, grad_norm)  # (TRL's log: rlvr.train.trl_log)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.s.ref_sync is not None and self.ref_model is not None:
            alpha, every = self.s.ref_sync
            if getattr(self.scheduler, "last_epoch", 0) % every == 0:  # TRL's SyncRefModelCallback: global_step
                sync_reference(unwrap(self.model), self.ref_model, alpha)

    def loss_inputs(self, batch: OptimizerBatch, rows: list[int], keep: torch.Tensor, *,
                    on_policy: bool) -> LossInputs:
        """The forward of micro-batch ``rows`` and everything else the loss reads, in one place."""
        s, exp = self.s, batch.exp
        collated = collate([exp.prompt_ids[i] for i in rows], [exp.response_ids[i] for i in rows],
                           pad_token_id=self.pad_token_id)
        width = collated.response_width
        with autocast(_device(self.model), s.autocast):  # bf16=true: bf16 compute, fp32 log-probs and loss
            logprobs, entropy = response_logprobs(self.model, collated, temperature=s.temperature, with_entropy=True,
                                      entropy_grad=bonus_on(s), head_chunk=s.head_chunk)
        device = logprobs.device
        own = (collated.response_mask if all(exp.tool_masks[i] is None for i in rows)  # no tools: every token
               else exp.model_token_mask(rows, width))  # [n, T]: the model's tokens (a tool's result: context only)
        mask = (own & keep[rows].unsqueeze(-1)).to(device)  # [n, T]
        old = pad_rows([batch.old[i] for i in rows], width).to(device) if batch.old is not None else logprobs.detach()
        ref = pad_rows([batch.ref[i] for i in rows], width).to(device) if batch.ref is not None else None
        anchor = exp.is_anchor[rows]  # [n] on the host: no sync to ask whether any row is an anchor
        has_anchor = bool(anchor.any())
        anchor = anchor.to(device)
        sampled = None  # [n, T] the sampler's log-probs (anchors: 0, they have none)
        off_policy_sampled = s.loss.off_policy_mask_threshold is not None and s.off_policy_from_sampler
        if on_policy or s.is_correction is not None or off_policy_sampled:
            sampled = pad_rows([torch.tensor(exp.sampling_logprobs[i]) for i in rows], width).to(device)
        weights = correction = None
        if s.is_correction is not None:  # w_t from log π_old (on the prompt o was sampled from) vs log π_sampler
            c = s.is_correction
            correction = importance_weights(_is_numerator(batch, rows, old), sampled, mask & ~anchor.unsqueeze(-1),
                                            mode=c.mode, clip_min=c.clip_min, clip_max=c.clip_max)
            weights = torch.where(anchor.unsqueeze(-1), 1.0, correction.weights)  # anchors: 1 (not sampled)
        advantages = batch.advantages[rows].to(device)
        keep, bonus_mask = self._token_masks(logprobs, entropy, sampled if off_policy_sampled else old, advantages,
                                             mask, anchor)
        return LossInputs(
            logprobs=logprobs, entropy=entropy, old=old, ref=ref, advantages=advantages, keep=keep,
            bonus_mask=bonus_mask,
            mask=mask, is_anchor=anchor if has_anchor else None, is_weights=weights, correction=correction,
            sampled=sampled, shown=own.to(device) & ~anchor.unsqueeze(-1),
            on_own_prompt=exp.on_own_prompt[rows].unsqueeze(-1).to(device))

    def _token_masks(self, logprobs: torch.Tensor, entropy: torch.Tensor, behaviour: torch.Tensor,
                     advantages: torch.Tensor, mask: torch.Tensor, anchor: torch.Tensor):
        """(keep, bonus mask): TRL's off-policy sequence mask (log-probs of the behaviour policy: the sampler's
        under vLLM, as TRL's use_vllm, else old) and top_entropy_quantile's token mask (the quantile over every
        process's sampled tokens of the micro-batch), both keeping anchors (not sampled: out of the quantile);
        keep None when neither is on. The entropy bonus acts on the mask's tokens the entropy mask keeps."""
        s, keep, bonus_mask = self.s.loss, None, mask
        anchor = anchor.unsqueeze(-1)  # [n, 1]
        if s.top_entropy_quantile < 1:
            sampled = mask & ~anchor
            threshold = None
            if self.ctx.enabled:  # TRL: the quantile of every process's tokens
                values = [torch.as_tensor(v) for v in self.ctx.gather_objects(entropy.detach()[sampled].float().cpu())]
                every = torch.cat(values) if values else torch.zeros(0)
                threshold = torch.quantile(every, 1 - s.top_entropy_quantile).to(entropy.device) if every.numel() \
                    else torch.tensor(math.inf, device=entropy.device)
            high = high_entropy_mask(entropy, sampled, s.top_entropy_quantile, threshold)
            keep, bonus_mask = high | anchor, mask & high
        if s.off_policy_mask_threshold is not None:
            kept = off_policy_mask(logprobs, behaviour, advantages, mask, s.off_policy_mask_threshold) | anchor
            keep = kept if keep is None else keep & kept
        return keep, bonus_mask

    def loss(self, x: LossInputs, *, num_tokens: float,
             num_sequences: int) -> tuple[torch.Tensor, PolicyLoss, torch.Tensor | None]:
        """The micro-batch's share of the optimiser step's loss (module doc); (loss, per-token out, TRL's
        ``policy_loss`` of the micro-batch — its policy term before the step's share, dapo's as it is — when TRL
        logs it, i.e. with the entropy bonus, else None). TRL's evaluation loss is this on one whole batch
        (rlvr.train.evaluation_trl)."""
        s = self.s.loss
        out = policy_loss(x.logprobs, x.old, x.advantages, x.mask, s, is_anchor=x.is_anchor, ref_logprobs=x.ref,
                          is_weights=x.is_weights, keep=x.keep)  # (masks and w_t before β·KL, as TRL)
        loss = aggregate(out.per_token, x.mask, s.aggregation, max_completion_length=s.max_completion_length,
                         num_tokens=num_tokens, num_sequences=num_sequences)
        policy = None
        if bonus_on(self.s):  # TRL's bonus: this micro-batch's mean entropy, by its share of the step
            unshared = s.aggregation in ("dapo", "token_mean")  # (their normaliser is the step's: no share to undo)
            policy = loss.detach().to(torch.float64) * (1 if unshared else num_sequences / len(x.advantages))
            coef = self.entropy.applied() if self.entropy is not None else s.entropy_coef
            loss = loss - entropy_bonus(x.entropy, x.bonus_mask, coef=coef,
                                        share=len(x.advantages) / num_sequences, is_anchor=x.is_anchor)
        return loss, out, policy

    @torch.no_grad()
    def evaluation_loss(self, exp: Experience, advantages: torch.Tensor) -> tuple[float, dict[str, float]]:
        """TRL's loss of ``exp`` in evaluation (its ``prediction_step``: ``compute_loss`` in eval mode, no gradient):
        :meth:`loss` of the whole batch as one micro-batch with its own denominators (TRL's eval normaliser has no
        accumulation: dapo's is the batch's tokens), old = the log-probs (the policy that sampled it: ratio 1), the
        reference's when β > 0; and the batch's statistics by ``TOKEN_SUMS`` name (one micro-batch's means, as
        ``rlvr.train.metrics.trl_update_metrics`` reads them)."""
        s, rows = self.s, list(range(len(exp)))
        keep = ~exp.truncated if s.mask_truncated else torch.ones_like(exp.truncated)
        ref = (self._logprobs(self.ref_model, exp.reference_prompt_ids, exp, rows, s.per_device_train_batch_size)
               if s.needs_reference else None)
        x = self.loss_inputs(OptimizerBatch(exp, advantages, None, ref, [rows]), rows, keep, on_policy=False)
        num_tokens = float(sum(exp.model_tokens(i) for i in rows if keep[i]))
        loss, out, policy = self.loss(x, num_tokens=num_tokens, num_sequences=len(rows))
        values = micro_statistics(out, x, s, on_policy=False, first_pass=False)
        if policy is not None:
            values["policy_loss_micro"] = policy
        return float(loss), {name: float(value) for name, value in values.items()}


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


def sync_reference(policy, reference, alpha: float) -> None:
    """TRL's SyncRefModelCallback (TR-DPO): every reference parameter ← α · the policy's + (1 − α) · its own."""
    with torch.no_grad():
        for ref, own in zip(reference.parameters(), policy.parameters(), strict=True):
            ref.mul_(1.0 - alpha).add_(own.to(ref.dtype), alpha=alpha)


def micro_means(out, entropy: torch.Tensor, mask: torch.Tensor, is_anchor: torch.Tensor, *,
                sequence_level: bool) -> dict[str, torch.Tensor]:
    """One micro-batch's means of TRL's train metrics (float64 scalars on the device, no host sync).

    ``out``: the micro-batch's ``rlvr.core.losses.PolicyLoss``; ``entropy`` [n, T]; ``mask`` [n, T];
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
        "clip_extreme_micro": torch.ones((), dtype=torch.float64, device=mask.device) if low_seq.numel() else zero,
    }


def _is_numerator(batch: OptimizerBatch, rows: list[int], old: torch.Tensor) -> torch.Tensor:
    """[n, T] log π_old of ``rows`` on the prompt each was sampled from: ``old`` (the old log-probs, or
    ``logprobs.detach()`` on the single on-policy pass), except where ``batch.sampled_old`` has a row."""
    if batch.sampled_old is None or all(batch.sampled_old[i] is None for i in rows):
        return old
    own = torch.tensor([batch.sampled_old[i] is None for i in rows], device=old.device).unsqueeze(-1)
    other = pad_rows([batch.sampled_old[i] if batch.sampled_old[i] is not None else torch.zeros(0) for i in rows],
                     old.shape[1]).to(old.device)
    return torch.where(own, old, other)


@dataclass
class OptimizerBatch:
    """One mini-batch's inputs: the experience, its advantages and old/reference log-probs, the rank shares."""

    exp: Experience
    advantages: torch.Tensor  # [N]
    old: list[torch.Tensor | None] | None  # N × [T_i] (None: old = logp.detach())
    ref: list[torch.Tensor | None] | None  # N × [T_i] (None: β = 0)
    shares: list[list[int]]  # rank r -> its responses of this mini-batch
    # IS correction: N × [T_i] log π_old on the prompt a response was sampled from, where ``old`` is scored on
    # another (TA-GRPO); None where ``old`` serves (None: for all)
    sampled_old: list[torch.Tensor | None] | None = None


def rank_share(pool_ids: torch.Tensor, mini: list[int], ctx: DistContext, rank: int) -> list[int]:
    """The responses of ``mini`` that ``rank`` trains on: a contiguous share of its pools (never split)."""
    if not ctx.enabled:
        return mini
    order: dict[int, list[int]] = {}
    for i in mini:
        order.setdefault(int(pool_ids[i]), []).append(i)
    pools = list(order.values())
    return [i for p in ctx.share(len(pools), rank) for i in pools[p]]


def _zero_loss_pass(model, pad_token_id: int) -> None:
    """A one-token forward/backward with loss 0: takes part in the gradient collectives, adds nothing."""
    batch = collate([[pad_token_id]], [[pad_token_id]], pad_token_id=pad_token_id)
    logprobs, _ = response_logprobs(model, batch, temperature=1.0)
    (logprobs.sum() * 0.0).backward()


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _full(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a tensor or DTensor (FSDP2's clip_grad_norm_ returns a DTensor)."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value
