"""The objective's finer controls, TRL's and verl's names: the settings of the policy losses beyond PPO's clip
(``policy_loss`` / TRL's ``loss_type`` cispo, sapo, vespo; verl's clip_cov, kl_cov), TRL's token and sequence masks
(``top_entropy_quantile``, ``off_policy_mask_threshold``), its adaptive entropy bonus and its reference-model sync.
What each computes: rlvr.core.loss_variants, rlvr.core.entropy_control, docs/training.md ("Loss variants")."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import _f, _fail


@dataclass(frozen=True)
class ObjectiveConfig:
    sapo_temperature_pos: float = _f(1.0, "SAPO's gate temperature for A > 0 (policy_loss=sapo; TRL name)")
    sapo_temperature_neg: float = _f(1.05, "SAPO's gate temperature for A <= 0 (TRL name)")
    vespo_k_pos: float = _f(2.0, "VESPO's gamma-weight shape k for A >= 0 (policy_loss=vespo; TRL name)")
    vespo_lambda_pos: float = _f(3.0, "VESPO's gamma-weight rate lambda for A >= 0 (TRL name)")
    vespo_k_neg: float = _f(3.0, "VESPO's k for A < 0 (TRL name)")
    vespo_lambda_neg: float = _f(2.0, "VESPO's lambda for A < 0 (TRL name)")
    clip_cov_ratio: float = _f(0.0002, "Clip-Cov (policy_loss=clip_cov): the fraction of tokens whose gradient is "
                                       "removed (verl: policy_loss.clip_cov_ratio)")
    clip_cov_lb: float = _f(1.0, "Clip-Cov: lower bound of the covariance window (verl name)")
    clip_cov_ub: float = _f(5.0, "Clip-Cov: upper bound of the covariance window (verl name)")
    kl_cov_ratio: float = _f(0.0002, "KL-Cov (policy_loss=kl_cov): the fraction of tokens given the |log ratio| "
                                     "penalty (verl: policy_loss.kl_cov_ratio)")
    ppo_kl_coef: float = _f(1.0, "KL-Cov: the penalty's coefficient (verl name)")
    top_entropy_quantile: float = _f(1.0, "train on the tokens whose entropy is in the top q of each micro-batch's "
                                          "(all processes'); 1: every token (TRL name; 0.2: the 80/20 rule)")
    off_policy_mask_threshold: float | None = _f(None, "drop a response with A < 0 whose mean log(pi_sampler / "
                                                       "pi_theta) exceeds this (DeepSeek-V3.2's off-policy mask; "
                                                       "TRL name); null: off")
    use_adaptive_entropy: bool = _f(False, "TRL's adaptive entropy bonus: entropy_coef moves by entropy_coef_delta "
                                           "each optimiser step, up while the entropy is at most entropy_target, "
                                           "down otherwise, within [entropy_coef_min, entropy_coef_max]; the bonus "
                                           "applies only while the last step's entropy was at most the target")
    entropy_coef_min: float = _f(0.0, "adaptive entropy: the coefficient's floor (TRL name)")
    entropy_coef_max: float = _f(1.0, "adaptive entropy: the coefficient's ceiling (TRL name)")
    entropy_coef_delta: float = _f(0.005, "adaptive entropy: the coefficient's step (TRL name)")
    entropy_target: float = _f(0.2, "adaptive entropy: the target mean entropy, nats (TRL name)")
    sync_ref_model: bool = _f(False, "move the reference model towards the policy every ref_model_sync_steps "
                                     "optimiser steps: ref = alpha x policy + (1 - alpha) x ref (TR-DPO; TRL name; "
                                     "needs beta > 0 and no LoRA, as TRL)")
    ref_model_mixup_alpha: float = _f(0.6, "sync_ref_model's alpha (TRL name)")
    ref_model_sync_steps: int = _f(512, "sync_ref_model's interval in optimiser steps (TRL name)")

    def __post_init__(self) -> None:
        if not 0 < self.top_entropy_quantile <= 1:
            _fail("top_entropy_quantile", self.top_entropy_quantile, "use a fraction in (0, 1] (1: every token)")
        for name in ("sapo_temperature_pos", "sapo_temperature_neg", "clip_cov_ratio", "kl_cov_ratio"):
            if getattr(self, name) <= 0:
                _fail(name, getattr(self, name), "use a positive number")
        if self.clip_cov_lb >= self.clip_cov_ub:
            _fail("clip_cov_lb", self.clip_cov_lb, f"use a lower bound below clip_cov_ub ({self.clip_cov_ub})")
        if not 0 <= self.entropy_coef_min <= self.entropy_coef_max:
            _fail("entropy_coef_min", (self.entropy_coef_min, self.entropy_coef_max),
                  "use 0 <= entropy_coef_min <= entropy_coef_max")
        if self.entropy_coef_delta < 0:
            _fail("entropy_coef_delta", self.entropy_coef_delta, "use a step >= 0")
        if not 0 <= self.ref_model_mixup_alpha <= 1:
            _fail("ref_model_mixup_alpha", self.ref_model_mixup_alpha, "use a fraction in [0, 1] (TRL's 0.6)")
        if self.ref_model_sync_steps < 1:
            _fail("ref_model_sync_steps", self.ref_model_sync_steps, "use at least 1 optimiser step")
