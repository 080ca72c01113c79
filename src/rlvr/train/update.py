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
importance weights) and its statistics go to one accumulator (``rlvr.train.metrics.Statistics``). How the batch
is cut (mini-batches, each rank's share, micro-batches by length) is ``rlvr.train.batching``'s; what the update
measures (``UpdateResult``, the micro-batch statistics) is ``rlvr.train.metrics``'s.

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
from pathlib import Path

import torch

from rlvr.core.entropy_control import EntropyController
from rlvr.core.importance import importance_weights
from rlvr.core.loss_variants import high_entropy_mask, off_policy_mask
from rlvr.core.losses import PolicyLoss, aggregate, entropy_bonus, policy_loss
from rlvr.parallel.runtime import ALONE, DistContext, autocast, full_weights, gradient_sync, unwrap
from rlvr.train.batching import (
    LossInputs,
    OptimizerBatch,
    collate,
    is_numerator,
    length_buckets,
    minibatches,
    pad_rows,
    rank_share,
    response_logprobs,
    response_logprobs_no_grad,
)
from rlvr.train.experience import Experience
from rlvr.train.metrics import TOKEN_MAXES, TOKEN_SUMS, Statistics, UpdateResult, bonus_on, micro_statistics
from rlvr.train.plan import UpdateSettings

ENTROPY_STATE = "entropy_ctrl_state.json"  # TRL's file: the adaptive entropy control's coefficient and last entropy
# sync_ref_model: the reference moves with the policy (not *.safetensors: those are the policy's weights)
REFERENCE_WEIGHTS = "reference_model.pt"


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
                        ctx.gather_values(torch.zeros(0))
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
            correction = importance_weights(is_numerator(batch, rows, old), sampled, mask & ~anchor.unsqueeze(-1),
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
                every = self.ctx.gather_values(entropy.detach()[sampled].float())  # [every rank's sampled tokens]
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


def sync_reference(policy, reference, alpha: float) -> None:
    """TRL's SyncRefModelCallback (TR-DPO): every reference parameter ← α · the policy's + (1 − α) · its own."""
    with torch.no_grad():
        for ref, own in zip(reference.parameters(), policy.parameters(), strict=True):
            ref.mul_(1.0 - alpha).add_(own.to(ref.dtype), alpha=alpha)


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
