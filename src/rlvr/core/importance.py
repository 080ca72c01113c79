"""The sampler/trainer importance-sampling correction (TRL's ``vllm_importance_sampling_correction``).

The sampler (vLLM, or one-step-stale weights) and the trainer compute slightly different log-probs
for the same tokens, so the responses were drawn from π_sampler, not from π_old, the policy the
update starts from. Each token's policy loss is weighted by the importance ratio between the two,
detached (a fixed weight, no gradient), truncated or masked so that a few tokens with a large
mismatch cannot blow up the update. Over the valid tokens (``mask``), with
d_t = log π_old(o_t) − log π_sampler(o_t):

    token_truncate      w_t = clip(exp(d_t), C_min, C_max)
    token_mask          w_t = exp(d_t)               if C_min ≤ exp(d_t) ≤ C_max, else 0
    sequence_truncate   w_t = clip(exp(Σ_s d_s), C_min, C_max)           (the same for every token)
    sequence_mask       w_t = exp(Σ_s d_s)  if C_min ≤ exp(Σ_s d_s) ≤ C_max, else 0

Σ_s runs over the sequence's valid tokens only; a bound that is None is no bound; w_t = 0 off the
mask. A d_t that is NaN (a log-prob the sampler could not give) counts as 0 (ratio 1), as in TRL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlvr.core.names import IS_MODES  # defined without torch, for config


@dataclass
class ISWeights:
    """The correction's weights and what a metric needs about them (all detached, on the device)."""

    weights: torch.Tensor  # [N, T] w_t on the mask, 0 off it
    ratio: torch.Tensor  # [N, T] the raw ratio before truncation/masking (sequence modes: the sequence's), 0 off the mask
    adjusted: torch.Tensor  # [N, T] bool: valid tokens whose weight was truncated or masked (w_t ≠ raw ratio)
    log_diff: torch.Tensor  # [N, T] d_t, 0 off the mask
    unit_ratio: torch.Tensor  # the raw ratio per unit: [N, T] per token, [N, 1] per sequence (sequence modes)
    units: torch.Tensor  # bool, unit_ratio's shape: the units the ratio is computed for (valid tokens / sequences)
    mask: torch.Tensor  # [N, T] bool, the valid tokens
    unit_weight: torch.Tensor | None = None  # the weight per unit, after truncation or masking (unit_ratio's shape)

    def stats(self) -> dict[str, torch.Tensor]:
        """Scalar tensors, no host sync: the raw ratio's sum, count, min and max over its units
        (tokens; sequence modes: the sequences with a valid token), and the numbers of valid and of
        truncated-or-masked tokens; the same sum, min and max of the weights (after truncation or masking:
        what TRL logs as ``sampling/importance_sampling_ratio/*``). Min / max are +inf / −inf when there are no
        units."""
        inf = torch.tensor(math.inf, dtype=self.unit_ratio.dtype, device=self.unit_ratio.device)
        empty = self.units.numel() == 0
        extremes = lambda x: (inf if empty else torch.where(self.units, x, inf).amin(),
                              -inf if empty else torch.where(self.units, x, -inf).amax())
        ratio_min, ratio_max = extremes(self.unit_ratio)
        weight_min, weight_max = extremes(self.unit_weight)
        return {
            "ratio_sum": torch.where(self.units, self.unit_ratio, 0.0).sum(), "units": self.units.sum(),
            "ratio_min": ratio_min, "ratio_max": ratio_max,
            "weight_sum": torch.where(self.units, self.unit_weight, 0.0).sum(),
            "weight_min": weight_min, "weight_max": weight_max,
            "tokens": self.mask.sum(), "adjusted_tokens": self.adjusted.sum(),
        }


def importance_weights(
    old_logprobs: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> ISWeights:
    """The detached weights w_t of the module docstring's ``mode``.

    Args:
        old_logprobs: [N, T] log π_old (the trainer's, at the start of the update).
        sampling_logprobs: [N, T] log π_sampler (what the rollout engine reported).
        mask: [N, T] bool, the tokens the correction applies to (padding False).
        mode: token_truncate | token_mask | sequence_truncate | sequence_mask.
        clip_min, clip_max: C_min, C_max (None: no bound on that side).
    """
    if mode not in IS_MODES:
        raise ValueError(f"vllm_importance_sampling_mode={mode!r}; valid: {IS_MODES}")
    mask = mask.bool()
    with torch.no_grad():
        diff = torch.where(mask, old_logprobs.detach().float() - sampling_logprobs.detach().float(), 0.0)
        diff = torch.nan_to_num(diff, nan=0.0)  # [N, T] d_t (TRL: NaN → 0, ratio 1)
        if mode.startswith("sequence"):
            units = mask.any(-1, keepdim=True)  # [N, 1]
            unit_ratio = torch.exp(diff.sum(-1, keepdim=True))  # [N, 1] exp(Σ_t d_t) over the valid tokens
        else:
            units, unit_ratio = mask, torch.exp(diff)  # [N, T]
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        outside = (unit_ratio < low) | (unit_ratio > high)
        if mode.endswith("truncate"):
            bounded = clip_min is not None or clip_max is not None  # (clamp refuses two None bounds)
            unit_weight = unit_ratio.clamp(min=clip_min, max=clip_max) if bounded else unit_ratio
        else:
            unit_weight = torch.where(outside, 0.0, unit_ratio)
        zero = torch.zeros_like(diff)
        weights = torch.where(mask, unit_weight, zero)  # broadcast: [N, 1] -> [N, T]
        ratio = torch.where(mask, unit_ratio, zero)
        adjusted = mask & outside
    return ISWeights(weights, ratio, adjusted, diff, torch.where(units, unit_ratio, 0.0), units, mask,
                     torch.where(units, unit_weight, 0.0))
