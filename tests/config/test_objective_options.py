"""The objective's controls and the run's gap alarm refuse what they cannot mean, each with a line naming the
option and the fix (rlvr.config.objective, rlvr.config.experiment's cross-section checks, RunConfig, EvalConfig)."""

import pytest

from rlvr.config import build_config

REFUSED = [
    ({"top_entropy_quantile": 0.0}, "top_entropy_quantile.*fraction in \\(0, 1\\]"),
    ({"sapo_temperature_neg": 0.0}, "sapo_temperature_neg.*positive"),
    ({"clip_cov_ratio": -1.0}, "clip_cov_ratio.*positive"),
    ({"clip_cov_lb": 5.0, "clip_cov_ub": 5.0}, "clip_cov_lb.*below clip_cov_ub"),
    ({"entropy_coef_min": 0.5, "entropy_coef_max": 0.1}, "entropy_coef_min <= entropy_coef_max"),
    ({"entropy_coef_delta": -0.1}, "entropy_coef_delta.*step >= 0"),
    ({"ref_model_mixup_alpha": 1.5}, "ref_model_mixup_alpha.*fraction in \\[0, 1\\]"),
    ({"ref_model_sync_steps": 0}, "ref_model_sync_steps.*at least 1"),
    ({"sync_ref_model": True}, "sync_ref_model.*beta = 0.*no reference model"),
    ({"sync_ref_model": True, "beta": 0.04, "lora_r": 4}, "sync_ref_model.*LoRA"),
    ({"multi_objective_aggregation": "mean"}, "multi_objective_aggregation.*sum_then_normalize"),
    ({"multi_objective_aggregation": "normalize_then_sum", "pair_masking": True}, "normalize_then_sum.*DaGRPO"),
    ({"loss_type": "cispo", "policy_loss": "sapo"}, "loss_type=cispo is TRL's cispo loss, but policy_loss=sapo"),
    ({"generation_kwargs": {"num_beams": 2}}, "generation_kwargs.*not num_beams"),
    ({"generation_kwargs": {"top_p": 2.0}}, "generation_kwargs.*top_p"),
    ({"logprob_mismatch_warn": -1.0}, "logprob_mismatch_warn/max_logprob_mismatch.*thresholds > 0"),
    ({"max_logprob_mismatch": 0.0}, "logprob_mismatch_warn/max_logprob_mismatch.*thresholds > 0"),
    ({"eval_mode": "loss", "eval_data": ["gsm8k-100"], "eval_steps": 2}, "eval_mode.*passk"),
    ({"eval_mode": "trl", "eval_data": ["gsm8k-100"], "eval_steps": 2, "eval_n": 3}, "per_device_eval_batch_size"),
]


@pytest.mark.parametrize(("options", "message"), REFUSED, ids=lambda v: str(v)[:40])
def test_a_value_that_cannot_mean_anything_is_refused_with_the_fix(options, message):
    with pytest.raises(ValueError, match=message):
        build_config({"reward_funcs": ["accuracy"], **options})


def test_the_accepted_values_reach_the_plan():
    from rlvr.train.plan import compile_plan

    plan = compile_plan(build_config({"reward_funcs": ["accuracy"], "beta": 0.04, "sync_ref_model": True,
                                      "ref_model_sync_steps": 3, "ref_model_mixup_alpha": 0.2,
                                      "use_adaptive_entropy": True, "entropy_target": 1.5,
                                      "logprob_mismatch_warn": 0.3, "max_logprob_mismatch": 2.0}))
    assert plan.update.ref_sync == (0.2, 3)
    assert plan.update.entropy_control.target == 1.5
    assert plan.logprob_mismatch == (0.3, 2.0)
