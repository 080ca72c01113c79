"""rlvr's policy loss against TRL 1.16's own ``GRPOTrainer._compute_loss``, option by option.

The same tiny model (float64 weights; TRL's fused LM head computes its log-probs in float32, and so does
rlvr's scorer) and the same hand-built micro-batches go through TRL's method and through rlvr's pieces:
``rlvr.train.batching.response_logprobs`` → ``rlvr.core.losses.policy_loss`` →
``rlvr.core.losses.aggregate`` (− ``entropy_bonus``). The loss (summed over an accumulation window), every
parameter's gradient and TRL's per-micro-batch train metrics must agree to 1e-6.

rlvr's reading of TRL's options (the trainer's plan): loss_type grpo → ``seq_mean_token_mean`` (N = the
window's rows), dr_grpo → ``seq_mean_token_sum_norm`` (L = max_completion_length), dapo → ``dapo``
(num_tokens = the generation batch's tokens ÷ (steps_per_generation / gradient_accumulation_steps)),
bnpo → ``bnpo``; delta → dual_clip; use_bias_correction_kl → kl_ratio_weighted; importance_sampling_level
→ importance_level; TRL's vLLM importance-sampling ratio → is_weights; entropy_coef → entropy_bonus with
share = the micro-batch's rows / the window's (1 / gradient_accumulation_steps); mask_truncated_completions →
the row left out of the mask. A delta inside the clip range (≤ 1 + epsilon_high) is refused by rlvr's config:
TRL then also caps positive-advantage tokens, which verl's dual clip does not
(test_a_delta_inside_the_clip_range_is_refused).
"""

from dataclasses import dataclass, fields
from types import SimpleNamespace

import pytest
import torch

from rlvr.core.importance import importance_weights
from rlvr.core.loss_variants import high_entropy_mask, off_policy_mask, vespo_weights
from rlvr.core.losses import LossSettings, aggregate, entropy_bonus, micro_means, policy_loss
from rlvr.core.names import resolve_aggregation, resolve_policy_loss
from rlvr.train.batching import collate, response_logprobs
from rlvr.train.metrics import variant_statistics

from .conftest import MAX_COMPLETION_LENGTH, TEMPERATURE, make_trl_trainer

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

EOS = 257
# Two micro-batches of 4 rows: prompts of different lengths (left padding, shared by rows), responses of
# different lengths (right padding; a 1-token row), so every normaliser has something to get wrong.
MICRO_BATCHES = [
    ([[10, 11, 12], [10, 11, 12], [20, 21, 22, 23, 24], [20, 21, 22, 23, 24]],
     [[30, 31, 32, 33, 34, EOS], [40, 41, 42], [50, 51, 52, 53, 54, 55], [EOS]]),
    ([[70, 71], [70, 71], [70, 71], [80, 81, 82, 83]],
     [[90, 91, 92, 93, 94, 95, 96, EOS], [97, 98], [99, 100, 101, 102, EOS], [103, 104, 105, 106, 107, 108]]),
]
ADVANTAGES = [[1.0, -0.8, 0.6, -1.3], [-0.5, 1.2, 0.0, -0.9]]  # mixed signs, and a zero
# log π − log π_old per row (ratio exp(shift)), plus a small per-token jitter: rows above 1 + ε_high
# with A > 0, below 1 − ε with A < 0, and above δ = 1.5 with A < 0, at token and at sequence level
RATIO_SHIFT = [[0.5, -0.4, 0.1, 0.6], [-0.35, 0.45, 0.2, 0.7]]
REF_SHIFT = [[0.3, -0.2, 0.15, -0.25], [0.1, -0.3, 0.2, 0.05]]  # log π − log π_ref per row
SAMPLER_SHIFT = [[0.9, -0.1, 0.05, -1.2], [0.3, 1.3, -0.6, 0.0]]  # log π_old − log π_sampler per row
IS_CLIP = dict(clip_min=0.5, clip_max=2.0)  # TRL's vllm_importance_sampling_clip_min / _max
OTHER_TOKENS = 13  # tokens of the generation batch's micro-batches outside the window (steps_per_generation > A)
DELTA = 1.5
SMALL_DELTA = 1.1  # inside the clip range [1 − ε, 1 + ε_high]: accepted by TRL, refused by rlvr
AGGREGATION = {"grpo": "seq_mean_token_mean", "dr_grpo": "seq_mean_token_sum_norm", "dapo": "dapo", "bnpo": "bnpo",
               "luspo": "seq_mean_token_sum"}
# TRL's loss types that are not PPO's clip: (rlvr's policy loss, its aggregation), and the metric TRL logs for them
OTHER_LOSSES = {"cispo": ("cispo", "dapo"), "sapo": ("sapo", "seq_mean_token_mean"), "vespo": ("vespo", "dapo")}
VARIANT_METRICS = {"cispo": {"cispo_clip_ratio": "cispo_clip_micro"},
                   "vespo": {"vespo/phi_seq_mean": "vespo_phi_micro"}, "sapo": {}}
# TRL's per-micro-batch train metric -> rlvr.core.losses.micro_means's key
METRICS = {"entropy": "entropy_micro", "kl": "kl_micro", "clip_ratio/low_mean": "clip_low_micro",
           "clip_ratio/high_mean": "clip_high_micro", "clip_ratio/region_mean": "clip_region_micro",
           "clip_ratio/low_min": "clip_low_min_micro", "clip_ratio/high_max": "clip_high_max_micro"}


@dataclass(frozen=True)
class Case:
    """TRL's options of one case (defaults: TRL's, but loss_type grpo and an off-policy batch)."""

    loss_type: str = "grpo"
    beta: float = 0.0
    use_bias_correction_kl: bool = False
    epsilon_high: float = 0.2  # epsilon (low) is 0.2 throughout
    delta: float | None = None
    importance_sampling_level: str = "token"
    entropy_coef: float = 0.0
    off_policy: bool = True  # old_per_token_logps given (num_iterations > 1): ratios ≠ 1
    is_mode: str | None = None  # vllm_importance_sampling_mode with the correction on (use_vllm)
    accumulation: int = 1  # gradient_accumulation_steps: micro-batches summed
    steps_per_generation: int | None = None  # None: = accumulation
    mask_truncated_completions: bool = False  # the first row is truncated: TRL zeroes its completion_mask
    top_entropy_quantile: float = 1.0  # < 1: only the micro-batch's highest-entropy tokens are trained on
    off_policy_mask_threshold: float | None = None  # the off-policy sequence mask's δ

    def __str__(self) -> str:
        default = Case()
        return "-".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                        if getattr(self, f.name) != getattr(default, f.name)) or "grpo"


CASES = [
    # each loss type: on-policy, off-policy with asymmetric clipping, a window of two micro-batches
    *(Case(loss_type=t, off_policy=False) for t in AGGREGATION),
    *(Case(loss_type=t, epsilon_high=0.28) for t in AGGREGATION),
    *(Case(loss_type=t, accumulation=2) for t in AGGREGATION),
    Case(loss_type="dapo", accumulation=2, steps_per_generation=4),  # two optimiser steps per generation
    # GSPO's sequence-level ratio under each aggregation
    *(Case(loss_type=t, importance_sampling_level="sequence") for t in AGGREGATION),
    # the KL penalty, plain and ratio-weighted, at token and sequence level
    *(Case(beta=0.04, use_bias_correction_kl=b, importance_sampling_level=lvl)
      for b in (False, True) for lvl in ("token", "sequence")),
    Case(loss_type="dapo", beta=0.04, use_bias_correction_kl=True, accumulation=2),
    # two-sided clipping (delta)
    Case(delta=DELTA), Case(delta=DELTA, importance_sampling_level="sequence"),
    Case(loss_type="dr_grpo", delta=DELTA, epsilon_high=0.28, accumulation=2),
    # the entropy bonus
    Case(entropy_coef=0.01), Case(loss_type="dr_grpo", entropy_coef=0.01),
    Case(loss_type="bnpo", entropy_coef=0.01, accumulation=2), Case(loss_type="dapo", entropy_coef=0.01, accumulation=2),
    # the vLLM importance-sampling correction, each mode
    Case(is_mode="token_truncate"), Case(is_mode="token_mask"),
    Case(loss_type="dapo", is_mode="sequence_truncate", accumulation=2),
    Case(is_mode="sequence_mask", importance_sampling_level="sequence"),
    # mask_truncated_completions: a row with no loss tokens still counts as a sequence
    Case(mask_truncated_completions=True), Case(loss_type="dr_grpo", mask_truncated_completions=True, accumulation=2),
    Case(loss_type="dapo", mask_truncated_completions=True, accumulation=2),
    Case(loss_type="bnpo", mask_truncated_completions=True, entropy_coef=0.01),
    Case(mask_truncated_completions=True, importance_sampling_level="sequence"),
    # everything at once
    Case(loss_type="dapo", beta=0.04, use_bias_correction_kl=True, epsilon_high=0.28, delta=DELTA,
         is_mode="token_truncate", accumulation=2, steps_per_generation=4),
    Case(loss_type="grpo", beta=0.04, use_bias_correction_kl=True, delta=DELTA, entropy_coef=0.01,
         is_mode="sequence_mask", importance_sampling_level="sequence"),
    # TRL's other loss types (cispo's epsilon_high caps the ratio itself: TRL suggests 5; 1.3 here so it caps)
    Case(loss_type="cispo", epsilon_high=1.3), Case(loss_type="cispo", epsilon_high=1.3, accumulation=2),
    Case(loss_type="cispo", epsilon_high=1.3, importance_sampling_level="sequence", is_mode="token_truncate"),
    Case(loss_type="sapo"), Case(loss_type="sapo", accumulation=2, beta=0.04, entropy_coef=0.01),
    Case(loss_type="sapo", importance_sampling_level="sequence"),
    Case(loss_type="vespo"), Case(loss_type="vespo", accumulation=2, steps_per_generation=4),
    Case(loss_type="vespo", is_mode="token_mask"), Case(loss_type="vespo", is_mode="sequence_truncate"),
    Case(loss_type="luspo", accumulation=2), Case(loss_type="luspo", importance_sampling_level="sequence", beta=0.04),
    Case(loss_type="luspo", mask_truncated_completions=True, entropy_coef=0.01),
    # top_entropy_quantile (the entropy bonus then acts on the same tokens) and the off-policy sequence mask
    Case(top_entropy_quantile=0.2), Case(loss_type="dapo", top_entropy_quantile=0.5, entropy_coef=0.01, accumulation=2),
    Case(loss_type="sapo", top_entropy_quantile=0.5, beta=0.04),
    Case(off_policy_mask_threshold=0.05), Case(loss_type="dapo", off_policy_mask_threshold=0.05, accumulation=2),
    Case(off_policy_mask_threshold=0.05, is_mode="token_truncate"),  # under vLLM: the sampler's log-probs
    Case(loss_type="vespo", off_policy_mask_threshold=0.05, top_entropy_quantile=0.5, is_mode="sequence_mask"),
]


@dataclass
class MicroBatch:
    """One micro-batch in both forms, with the fixed log-probs the cases feed TRL and rlvr alike."""

    collated: object  # rlvr.train.batching.Collated
    inputs: dict  # TRL's inputs to _compute_loss (without the optional keys)
    advantages: torch.Tensor  # [4] float32, as TRL's _generate_and_score_completions gives them
    old: torch.Tensor  # [4, T] float32 log π_old, 0 at padding (as TRL's own)
    ref: torch.Tensor  # [4, T] float32 log π_ref
    sampler: torch.Tensor  # [4, T] float32 log π_sampler


def _shifted(base: torch.Tensor, mask: torch.Tensor, rows: list[float], seed: int) -> torch.Tensor:
    """[4, T] float32: base − rows[i] − a seeded jitter of ±0.1 on the mask, 0 at padding (as TRL's log-probs)."""
    jitter = 0.1 * torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    shifted = base.double() - torch.tensor(rows, dtype=torch.float64)[:, None] - jitter
    return torch.where(mask, shifted, 0.0).float()


def _build_micro_batches(model, pad_token_id: int) -> list[MicroBatch]:
    batches = []
    for k, (prompts, responses) in enumerate(MICRO_BATCHES):
        batch = collate(prompts, responses, pad_token_id=pad_token_id)
        with torch.no_grad():
            current, _ = response_logprobs(model, batch, temperature=TEMPERATURE)  # [4, T]
        mask = batch.response_mask
        old = _shifted(current, mask, RATIO_SHIFT[k], 10 + k)
        inputs = {"prompt_ids": batch.prompt_ids[batch.prompt_index], "prompt_mask": batch.prompt_mask[batch.prompt_index],
                  "completion_ids": batch.response_ids, "completion_mask": mask.long()}
        batches.append(MicroBatch(batch, inputs, torch.tensor(ADVANTAGES[k]), old,
                                  ref=_shifted(current, mask, REF_SHIFT[k], 30 + k),
                                  sampler=_shifted(old, mask, SAMPLER_SHIFT[k], 20 + k)))
    return batches


def _zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    trainer = make_trl_trainer(tmp_path_factory.mktemp("trl_loss"), [_zero_reward])
    model = trainer.model.double().train()  # train mode: TRL's _compute_loss divides for accumulation only then
    return trainer, model, _build_micro_batches(model, trainer.processing_class.pad_token_id)


def _loss_mask(case: Case, mb: MicroBatch, k: int) -> torch.Tensor:
    """[4, T] bool, the tokens trained on: with mask_truncated_completions, none of the window's first row."""
    mask = mb.collated.response_mask.clone()
    if case.mask_truncated_completions and k == 0:
        mask[0] = False
    return mask


def _is_weights(case: Case, mb: MicroBatch, k: int) -> torch.Tensor:
    """rlvr's importance weights of the micro-batch (compared with TRL's own computation of the ratio in
    test_trl_advantages.py); the same tensor is TRL's ``importance_sampling_ratio`` input here."""
    return importance_weights(mb.old, mb.sampler, _loss_mask(case, mb, k), mode=case.is_mode, **IS_CLIP).weights


def _trl_is_ratio(case: Case, mb: MicroBatch, k: int) -> torch.Tensor:
    """The same weights in the form TRL's _generate_and_score_completions gives them: [4, T] with 1 off the mask
    (token modes: exp of a masked-out 0), [4, 1] per sequence (sequence modes; 1 for a row with no loss token)."""
    weights, mask = _is_weights(case, mb, k), _loss_mask(case, mb, k)
    if case.is_mode.startswith("sequence"):
        return torch.where(mask.any(-1), weights.max(-1).values, 1.0).unsqueeze(-1)
    return torch.where(mask, weights, 1.0)


def _window(case: Case, batches: list[MicroBatch]) -> list[MicroBatch]:
    return batches[: case.accumulation]


def _generation_tokens(case: Case, window: list[MicroBatch]) -> int:
    """TRL's num_items_in_batch: the loss tokens of the whole generation batch."""
    steps = case.steps_per_generation or case.accumulation
    tokens = sum(int(_loss_mask(case, mb, k).sum()) for k, mb in enumerate(window))
    return tokens + (OTHER_TOKENS if steps > case.accumulation else 0)


def _trl_loss(trainer, model, case: Case, batches: list[MicroBatch], monkeypatch):
    """TRL's own _compute_loss over the window's micro-batches: (summed loss, gradients, metrics per micro-batch)."""
    settings = {
        "loss_type": case.loss_type, "beta": case.beta, "epsilon_low": 0.2, "epsilon_high": case.epsilon_high,
        "importance_sampling_level": case.importance_sampling_level, "entropy_coef": case.entropy_coef,
        "_entropy_bonus_enabled": case.entropy_coef != 0.0, "use_adaptive_entropy": False,
        "top_entropy_quantile": case.top_entropy_quantile, "off_policy_mask_threshold": case.off_policy_mask_threshold,
        "max_completion_length": MAX_COMPLETION_LENGTH,
        "use_vllm": case.is_mode is not None, "vllm_importance_sampling_correction": True,
        "current_gradient_accumulation_steps": case.accumulation,
    }
    for name, value in settings.items():
        monkeypatch.setattr(trainer, name, value, raising=False)
    for name, value in {"delta": case.delta, "use_bias_correction_kl": case.use_bias_correction_kl,
                        "steps_per_generation": case.steps_per_generation or case.accumulation}.items():
        monkeypatch.setattr(trainer.args, name, value)
    window = _window(case, batches)
    model.zero_grad(set_to_none=True)
    total, metrics = 0.0, []
    for k, mb in enumerate(window):
        mask = _loss_mask(case, mb, k)
        inputs = {**mb.inputs, "completion_mask": mask.long(), "advantages": mb.advantages,
                  "num_items_in_batch": torch.tensor(float(_generation_tokens(case, window)))}
        if case.off_policy:  # TRL's own old/ref log-probs are 0 where completion_mask is
            inputs["old_per_token_logps"] = mb.old * mask
        if case.beta:
            inputs["ref_per_token_logps"] = mb.ref * mask
        if case.is_mode is not None:
            inputs["importance_sampling_ratio"] = _trl_is_ratio(case, mb, k)
            inputs["sampling_per_token_logps"] = mb.sampler * mask
        trainer._metrics["train"].clear()
        loss = trainer._compute_loss(model, inputs)
        loss.backward()
        total += loss.item()
        logged = (*METRICS, *VARIANT_METRICS.get(case.loss_type, {}))
        metrics.append({name: trainer._metrics["train"][name][-1] for name in logged if name in trainer._metrics["train"]})
    return total, {n: p.grad.clone() for n, p in model.named_parameters()}, metrics


def _settings(case: Case) -> LossSettings:
    """rlvr's loss settings for TRL's options, as the config reads them (names.resolve_policy_loss/_aggregation)."""
    return LossSettings(
        policy_loss=resolve_policy_loss("clip", case.loss_type), epsilon=0.2, epsilon_high=case.epsilon_high,
        dual_clip=case.delta, importance_level=case.importance_sampling_level, beta=case.beta,
        kl_ratio_weighted=case.use_bias_correction_kl, aggregation=resolve_aggregation(case.loss_type),
        max_completion_length=MAX_COMPLETION_LENGTH, entropy_coef=case.entropy_coef,
        is_level=case.is_mode.split("_")[0] if case.is_mode else None, top_entropy_quantile=case.top_entropy_quantile,
        off_policy_mask_threshold=case.off_policy_mask_threshold)


def _keep(case: Case, logprobs, entropy, behaviour, advantages, mask):
    """(keep, the entropy bonus's mask): rlvr's off-policy and high-entropy masks (train/update.py's _token_masks)."""
    keep, bonus = None, mask
    if case.top_entropy_quantile < 1:
        high = high_entropy_mask(entropy, mask, case.top_entropy_quantile)
        keep, bonus = high, mask & high
    if case.off_policy_mask_threshold is not None:
        kept = off_policy_mask(logprobs, behaviour, advantages, mask, case.off_policy_mask_threshold)
        keep = kept if keep is None else keep & kept
    return keep, bonus


def _rlvr_loss(model, case: Case, batches: list[MicroBatch]):
    """rlvr's response_logprobs, policy_loss, aggregate and entropy_bonus over the same window."""
    window = _window(case, batches)
    steps_per_pass = (case.steps_per_generation or case.accumulation) / case.accumulation
    num_tokens = _generation_tokens(case, window) / steps_per_pass
    num_sequences = sum(len(mb.advantages) for mb in window)
    settings = _settings(case)
    model.zero_grad(set_to_none=True)
    total, metrics = 0.0, []
    for k, mb in enumerate(window):
        logprobs, entropy = response_logprobs(model, mb.collated, temperature=TEMPERATURE, with_entropy=True,
                                              entropy_grad=case.entropy_coef > 0)
        mask = _loss_mask(case, mb, k)
        old = mb.old if case.off_policy else logprobs.detach()
        weights = _is_weights(case, mb, k) if case.is_mode else None
        keep, bonus = _keep(case, logprobs, entropy, mb.sampler if case.is_mode else old, mb.advantages, mask)
        out = policy_loss(logprobs, old, mb.advantages, mask, settings, ref_logprobs=mb.ref if case.beta else None,
                          is_weights=weights, keep=keep)
        loss = aggregate(out.per_token, mask, settings.aggregation,
                         max_completion_length=settings.max_completion_length, num_tokens=num_tokens,
                         num_sequences=num_sequences)
        if settings.entropy_coef:
            loss = loss - entropy_bonus(entropy, bonus, coef=settings.entropy_coef,
                                        share=len(mb.advantages) / num_sequences)
        loss.backward()
        total += loss.item()
        no_anchor = torch.zeros(len(mask), dtype=torch.bool)
        means = micro_means(out, entropy.detach(), mask, no_anchor,
                            sequence_level=case.importance_sampling_level == "sequence")
        means |= variant_statistics(SimpleNamespace(mask=mask, logprobs=logprobs, old=old, advantages=mb.advantages,
                                                    is_weights=weights), settings, no_anchor)
        names = {**METRICS, **VARIANT_METRICS.get(case.loss_type, {})}
        metrics.append({name: float(means[key]) for name, key in names.items() if key in means})
    return total, {n: p.grad.clone() for n, p in model.named_parameters()}, metrics


def test_the_loss_types_are_read_as_the_config_reads_them():
    """AGGREGATION is rlvr.core.names.resolve_aggregation of TRL's loss_type (AlgorithmConfig.aggregation); TRL's
    other loss types choose the policy loss too (AlgorithmConfig.policy)."""
    assert {name: resolve_aggregation(name) for name in AGGREGATION} == AGGREGATION
    assert {name: (resolve_policy_loss("clip", name), resolve_aggregation(name)) for name in OTHER_LOSSES} == OTHER_LOSSES
    from rlvr.config import build_config

    for name, (policy, aggregation) in OTHER_LOSSES.items():
        algorithm = build_config({"loss_type": name}).algorithm
        assert (algorithm.policy, algorithm.aggregation) == (policy, aggregation)


def test_the_log_probs_and_entropies_are_trls(prepared):
    """TRL's own _get_per_token_logps_and_entropies (fused LM head, temperature 0.7) = rlvr's response_logprobs,
    on the mask."""
    trainer, model, batches = prepared
    for mb in batches:
        inputs = mb.inputs
        with torch.no_grad():
            trl_logps, trl_entropy, _ = trainer._get_per_token_logps_and_entropies(
                model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
                inputs["completion_ids"].shape[1], compute_entropy=True)
            logprobs, entropy = response_logprobs(model, mb.collated, temperature=TEMPERATURE, with_entropy=True)
        mask = mb.collated.response_mask
        torch.testing.assert_close(logprobs[mask], trl_logps[mask], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(entropy[mask], trl_entropy[mask], rtol=1e-6, atol=1e-6)


def test_the_batch_reaches_every_clip_region(prepared):
    """The fixed batch is not vacuous: at token and sequence level some tokens are clipped low (A < 0),
    some high (A > 0, ε_high = 0.28), some past δ (A < 0), some unclipped; the IS modes truncate and mask."""
    _, model, batches = prepared
    for level in ("token", "sequence"):
        low = high = past_delta = free = 0
        for mb in batches:
            with torch.no_grad():
                logprobs, _ = response_logprobs(model, mb.collated, temperature=TEMPERATURE)
            mask = mb.collated.response_mask
            out = policy_loss(logprobs, mb.old, mb.advantages, mask,
                              LossSettings(epsilon=0.2, epsilon_high=0.28, importance_level=level))
            ratio = ((logprobs - mb.old) * mask).sum(-1) / mask.sum(-1) if level == "sequence" else logprobs - mb.old
            ratio = ratio.exp().unsqueeze(-1) if level == "sequence" else ratio.exp()
            low += int(out.low_clipped.sum())
            high += int(out.high_clipped.sum())
            past_delta += int(((ratio > DELTA) & (mb.advantages[:, None] < 0) & mask).sum())
            free += int((mask & ~out.low_clipped & ~out.high_clipped & (mb.advantages[:, None] != 0)).sum())
        assert min(low, high, past_delta, free) > 0, (level, low, high, past_delta, free)
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        adjusted = sum(int(importance_weights(mb.old, mb.sampler, mb.collated.response_mask, mode=mode,
                                              **IS_CLIP).adjusted.sum()) for mb in batches)
        assert adjusted > 0, mode


def test_a_delta_inside_the_clip_range_is_refused():
    """TRL caps the unclipped term's ratio at delta for every sign of A: above 1 + epsilon_high that is verl's
    dual clip (the cases above); inside the clip range TRL also caps A > 0 tokens, so rlvr refuses it."""
    from rlvr.config import build_config

    assert build_config({"delta": DELTA, "epsilon_high": 0.28}).algorithm.dual_clip == DELTA
    with pytest.raises(ValueError, match="delta: 1.1: rlvr takes TRL's two-sided clipping above 1 \\+ epsilon_high"):
        build_config({"delta": SMALL_DELTA, "epsilon_high": 0.28})


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_loss_and_its_gradient_are_trls(prepared, case, monkeypatch):
    """TRL's own GRPOTrainer._compute_loss (loss.backward() per micro-batch, summed over the window) =
    rlvr's policy_loss + aggregate (− entropy_bonus): the loss and every parameter's gradient."""
    trainer, model, batches = prepared
    trl_total, trl_grads, _ = _trl_loss(trainer, model, case, batches, monkeypatch)
    total, grads, _ = _rlvr_loss(model, case, batches)
    assert total == pytest.approx(trl_total, rel=1e-6, abs=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, trl_grads[name], rtol=1e-6, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_train_metrics_are_trls(prepared, case, monkeypatch):
    """TRL's own per-micro-batch metrics logged by _compute_loss (entropy, kl, clip_ratio/low_mean, high_mean,
    region_mean, low_min, high_max) = rlvr.core.losses.micro_means of rlvr's policy_loss output."""
    trainer, model, batches = prepared
    _, _, trl_metrics = _trl_loss(trainer, model, case, batches, monkeypatch)
    _, _, metrics = _rlvr_loss(model, case, batches)
    clipped = case.loss_type not in OTHER_LOSSES  # TRL logs clip_ratio/* for PPO's clip only
    expected = (set(METRICS) - {"kl"} if clipped else {"entropy"}) | set(VARIANT_METRICS.get(case.loss_type, {}))
    for ours, theirs in zip(metrics, trl_metrics, strict=True):
        assert set(theirs) >= expected
        assert {k: ours[k] for k in theirs} == pytest.approx(theirs, rel=1e-6, abs=1e-6)


def test_the_batch_reaches_every_mask_and_cap(prepared):
    """The new cases are not vacuous on the fixed batch: the off-policy mask drops some responses and keeps others
    (from the old and from the sampler's log-probs), top_entropy_quantile keeps some tokens and not others, CISPO
    caps some ratios at 1.3 and VESPO's weights are not all 1."""
    _, model, batches = prepared
    dropped = kept = high = low = capped = 0
    phis = []
    for mb in batches:
        with torch.no_grad():
            logprobs, entropy = response_logprobs(model, mb.collated, temperature=TEMPERATURE, with_entropy=True)
        mask = mb.collated.response_mask
        for behaviour in (mb.old, mb.sampler):
            keep = off_policy_mask(logprobs, behaviour, mb.advantages, mask, 0.05)
            dropped, kept = dropped + int((~keep).sum()), kept + int(keep.sum())
        chosen = high_entropy_mask(entropy, mask, 0.2)
        high, low = high + int(chosen.sum()), low + int((mask & ~chosen).sum())
        out = policy_loss(logprobs, mb.old, mb.advantages, mask, LossSettings(policy_loss="cispo", epsilon_high=1.3))
        capped += int(out.clipped_tokens)
        settings = LossSettings(policy_loss="vespo")
        phis.append(vespo_weights(logprobs, mb.old, mb.advantages, mask, settings))
    assert min(dropped, kept, high, low, capped) > 0, (dropped, kept, high, low, capped)
    phi = torch.cat(phis)
    assert float((phi - 1).abs().max()) > 0.1 and bool((phi > 0).all())
