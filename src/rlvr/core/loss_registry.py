"""The registry of the sampled responses' per-token policy losses and the settings every loss reads: one place that
``rlvr.core.losses`` (PPO's clip, the anchor term, KL, aggregation) and ``rlvr.core.loss_variants`` (TRL's and
verl's other losses) both register into. Each loss declares its contract there (:class:`LossContract`: a float64
reference from ``rlvr.core.references`` and its value at ratio 1), which tests/contracts/test_loss_contract.py
holds it to."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from rlvr.core import references
from rlvr.core.names import POLICY_LOSS_NAMES


@dataclass(frozen=True)
class LossSettings:
    """One settings object for the whole loss (the plan builds it from the validated config)."""

    policy_loss: str = "clip"  # a name of POLICY_LOSSES
    epsilon: float = 0.2  # ε_low
    epsilon_high: float | None = None  # ε_high (None: ε_low)
    dual_clip: float | None = None  # c > 1: for A < 0 the loss is at most −c·A (verl's clip_ratio_c)
    importance_level: str = "token"  # token | sequence (GSPO: the length-normalised sequence ratio)
    ratio_cap: float | None = None  # TA-GRPO's truncated IS: ρ ≤ C before clipping
    beta: float = 0.0  # KL coefficient (0: no reference log-probs)
    kl_ratio_weighted: bool = False  # TRL's use_bias_correction_kl: the KL term times ρ
    anchor_psi: str = "log"  # DaGRPO's anchor shaping ψ: log | luffy
    anchor_gamma: float = 0.1  # γ of LUFFY's ψ(p) = p / (p + γ)
    aggregation: str = "token_mean"  # a name of AGGREGATIONS
    max_completion_length: int | None = None  # L_max of seq_mean_token_sum_norm
    entropy_coef: float = 0.0  # TRL's entropy bonus c (0: off; with adaptive entropy, the controller's start)
    sapo_temperature_pos: float = 1.0  # SAPO's τ for A > 0 (TRL's name)
    sapo_temperature_neg: float = 1.05  # SAPO's τ for A ≤ 0
    vespo_k_pos: float = 2.0  # VESPO's γ-weight shape k and rate λ, for A ≥ 0 and A < 0 (TRL's names)
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    is_level: str | None = None  # the sampler correction's level, token | sequence (VESPO reads it; None: off)
    clip_cov_ratio: float = 0.0002  # verl's Clip-Cov: the fraction of tokens whose gradient it removes
    clip_cov_lb: float = 1.0  # Clip-Cov's covariance window (lb, ub)
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002  # verl's KL-Cov: the fraction of tokens penalised
    ppo_kl_coef: float = 1.0  # KL-Cov's coefficient of |log ρ|
    top_entropy_quantile: float = 1.0  # TRL: train on the tokens of the top q of entropies (1: every token)
    off_policy_mask_threshold: float | None = None  # TRL's off-policy sequence mask δ (None: off)


# fn(logprobs [N, T], old_logprobs [N, T], advantages [N], mask [N, T], settings) -> (loss [N, T], clipped [N, T])
PolicyLossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, LossSettings],
                        tuple[torch.Tensor, torch.Tensor]]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}
WEIGHTS_INSIDE: set[str] = set()  # losses that take the sampler correction's weights themselves (keyword is_weights)
# fn(logprobs [N, T], advantages [N], settings) -> [N, T]: a loss's value where logprobs == old_logprobs (ρ = 1)
OnPolicyFn = Callable[[torch.Tensor, torch.Tensor, LossSettings], torch.Tensor]


@dataclass(frozen=True)
class LossContract:
    """What a policy loss declares at registration, and the generated suite checks it against."""

    # float64 (loss [N, T], clipped [N, T] bool), a plain loop per token written apart from the loss, with the
    # implementation's signature (core/references.py); autograd on it gives the reference gradient
    reference: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    on_policy: OnPolicyFn = references.on_policy_ratio  # its value at ρ = 1 (default: −A, the plain policy gradient)
    settings: tuple[dict, ...] = ({},)  # LossSettings overrides the suite checks it under


LOSS_CONTRACTS: dict[str, LossContract] = {}


def register_policy_loss(name: str, *, weights_inside: bool = False, reference: Callable | None = None,
                         on_policy: OnPolicyFn | None = None,
                         settings: Iterable[dict] = ({},)) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: the function becomes the sampled responses' per-token loss ``policy_loss=name``.

    It returns (loss [N, T], zero off the mask; clipped [N, T] bool, the tokens whose gradient it removed), with
    gradient through ``logprobs`` only. ``weights_inside``: the function takes the sampler/trainer correction's
    weights as ``is_weights=`` and uses them itself (VESPO); they are then not multiplied into its loss.
    ``reference``, ``on_policy`` and ``settings`` are its contract (:class:`LossContract`); without a reference
    it has none, and tests/contracts/test_loss_contract.py fails on it, saying what to declare.
    """
    contract = None if reference is None else LossContract(reference, on_policy or references.on_policy_ratio,
                                                           tuple(settings))

    def register(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES[name] = fn
        POLICY_LOSS_NAMES.add(name)  # the config accepts it from now on
        if weights_inside:
            WEIGHTS_INSIDE.add(name)
        if contract is None:
            LOSS_CONTRACTS.pop(name, None)
        else:
            LOSS_CONTRACTS[name] = contract
        return fn

    return register
