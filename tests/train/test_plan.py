"""compile_plan: one test per decision the training loop reads, each asserting the exact value."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest
import torch

import rlvr.core.loss_variants as loss_variants_module
import rlvr.core.losses as losses_module
import rlvr.train.update as update_module
from rlvr.config import build_config
from rlvr.core.losses import LossSettings, policy_loss
from rlvr.rollout.sampling import Sampling
from rlvr.train.plan import compile_plan
from rlvr.train.tagrpo import QUESTION, SAMPLED, LogprobPrompts

ALL_QUESTION = LogprobPrompts(QUESTION, QUESTION, QUESTION)
ALL_SAMPLED = LogprobPrompts(SAMPLED, SAMPLED, SAMPLED)
TRUNCATED_IS = LogprobPrompts(policy=QUESTION, old=SAMPLED, reference=QUESTION)


def _plan(**overrides):
    return compile_plan(build_config({"model": "tiny-random", **overrides}))


def test_default_grpo_plan():
    plan = _plan(num_generations=6, prompts_per_step=3)
    assert plan.mode == "rl"
    assert plan.scoring_prompts is None  # no rephrasings: every pass scores on q_0
    assert plan.update.needs_old_logprobs is False
    assert plan.update.loss.ratio_cap is None
    assert plan.rollout.dynamic_sampling is False
    assert plan.rollout.max_rounds == 1
    assert plan.rollout.responses_per_prompt == 6
    assert plan.rollout.prompts_per_step == 3
    assert plan.rollout.rephrased is False
    assert plan.tagrpo_metrics is False
    assert plan.dagrpo is None  # DaGRPO off (no pair masking, anchors or scorer)
    assert plan.advantages.report_pairs is False
    assert plan.advantages.settings.tau == 0.0
    assert plan.advantages.settings.tau_kappa is None
    assert plan.advantages.settings.contrast == "reward"
    assert plan.advantages.settings.estimator == "grpo"  # (no pair masking: not the masked pairwise form)
    assert plan.update.needs_reference is False


@pytest.mark.parametrize("update", [{"num_iterations": 2}, {"steps_per_generation": 2}])
def test_old_logprobs_needed_after_an_update(update):
    # μ > 1 or several mini-batches: the policy has moved by the time a later pass scores the batch.
    plan = _plan(prompts_per_step=2, **update)
    assert plan.update.needs_old_logprobs is True
    assert plan.update.num_iterations == update.get("num_iterations", 1)
    assert plan.update.num_minibatches == update.get("steps_per_generation", 1)
    assert plan.update.loss.ratio_cap is None


@pytest.mark.parametrize(("algo", "pooled"), [("tagrpo", True), ("tagrpo_unpooled", False)])
def test_tagrpo_original_anchor(algo, pooled):
    plan = _plan(algo=algo, num_generations=4)
    assert plan.scoring_prompts == ALL_QUESTION
    assert plan.rollout.rephrased is True
    assert plan.rollout.pooled is pooled
    assert plan.rollout.responses_per_prompt == 4  # G per variant, not (N+1)·G
    assert plan.tagrpo_metrics is True
    assert plan.update.needs_old_logprobs is False
    assert plan.update.loss.ratio_cap is None


def test_tagrpo_unanchored():
    plan = _plan(algo="tagrpo_unanchored")
    assert plan.scoring_prompts == ALL_SAMPLED
    assert plan.rollout.rephrased is True
    assert plan.update.needs_old_logprobs is False
    assert plan.update.loss.ratio_cap is None


@pytest.mark.parametrize(("extra", "cap"), [({}, 2.0), ({"truncated_is_cap": 3.5}, 3.5)])
def test_tagrpo_truncated_is(extra, cap):
    plan = _plan(algo="tagrpo", ratio_anchor="truncated_is", num_iterations=1, **extra)
    assert plan.scoring_prompts == TRUNCATED_IS
    # π_old(o|q_j) differs from π(o|q_0) even before any update: old log-probs are computed.
    assert plan.update.needs_old_logprobs is True
    assert plan.update.loss.ratio_cap == cap
    assert plan.rollout.rephrased is True


@pytest.mark.parametrize("ratio_anchor", ["unanchored", "truncated_is"])
def test_ratio_anchor_without_rephrasings_changes_nothing(ratio_anchor):
    # Every response was sampled from q_0: the ratio anchor is moot (no LogprobPrompts: q_0 on every pass).
    plan = _plan(ratio_anchor=ratio_anchor)
    assert plan.scoring_prompts is None
    assert plan.rollout.rephrased is False
    assert plan.update.needs_old_logprobs is False
    assert plan.update.loss.ratio_cap is None


@pytest.mark.parametrize(
    ("extra", "expected_responses"),
    [
        ({}, (4 + 1) * 8),  # preset N = 4, default G = 8
        ({"num_rephrasings": 2, "num_generations": 4}, (2 + 1) * 4),
        ({"ratio_anchor": "unanchored"}, (4 + 1) * 8),
        ({"ratio_anchor": "truncated_is"}, (4 + 1) * 8),
    ],
)
def test_equal_sampling(extra, expected_responses):
    plan = _plan(algo="equal_sampling", **extra)
    assert plan.rollout.responses_per_prompt == expected_responses
    assert plan.rollout.rephrased is False
    assert plan.scoring_prompts is None  # no rephrasings are sampled, whatever ratio_anchor says: q_0 on every pass
    assert plan.update.loss.ratio_cap is None
    assert plan.update.needs_old_logprobs is False
    assert plan.tagrpo_metrics is False


@pytest.mark.parametrize(("extra", "rounds"), [({}, 4), ({"max_num_gen_batches": 6}, 6)])
def test_dapo_dynamic_sampling(extra, rounds):
    plan = _plan(algo="dapo", **extra)
    assert plan.rollout.dynamic_sampling is True
    assert plan.rollout.max_rounds == rounds
    assert plan.update.loss.epsilon_high == 0.28


def test_max_rounds_is_one_without_dynamic_sampling():
    plan = _plan(max_num_gen_batches=6)
    assert plan.rollout.dynamic_sampling is False
    assert plan.rollout.max_rounds == 1


@pytest.mark.parametrize(
    ("extra", "tau", "kappa", "contrast"),
    [
        ({}, 0.2, None, "reward"),
        ({"pair_tau": 0.35, "pair_tau_kappa": 0.5, "contrast": "score"}, 0.35, 0.5, "score"),
    ],
)
def test_dagrpo_pair_masking(extra, tau, kappa, contrast):
    plan = _plan(algo="dagrpo", **extra)
    assert plan.advantages.settings.estimator == "dagrpo"  # pair masking: the masked pairwise form
    assert plan.advantages.settings.tau == tau
    assert plan.advantages.settings.tau_kappa == kappa
    assert plan.advantages.settings.contrast == contrast
    assert plan.advantages.report_pairs is True
    assert plan.dagrpo is not None


def test_dagrpo_anchors_without_pair_masking():
    # The pairwise form then equals GRPO's up to the anchors: τ, κ and the contrast fall back.
    plan = _plan(algo="dagrpo", pair_masking=False, anchors="failed", pair_tau=0.35, pair_tau_kappa=0.5,
                 contrast="score")
    assert plan.advantages.settings.estimator == "grpo"  # no pair masking: not the masked pairwise form
    assert plan.advantages.settings.tau == 0.0
    assert plan.advantages.settings.tau_kappa is None
    assert plan.advantages.settings.contrast == "reward"
    assert plan.advantages.report_pairs is True
    assert plan.dagrpo is not None and plan.dagrpo.anchors == "failed"  # DaGRPO's phase still runs (anchors)


def test_sampling_settings_are_one_value():
    assert _plan().rollout.sampling == Sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0)
    plan = _plan(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1)
    assert plan.rollout.sampling == Sampling(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1)


def test_sft_mode():
    assert _plan(algo="sft").mode == "sft"
    assert _plan(algo="grpo").mode == "rl"


def test_loss_settings_pass_through():
    plan = _plan(epsilon=0.1, epsilon_high=0.3, dual_clip=3.0, beta=0.04, anchor_psi="luffy", anchor_gamma=0.2,
                 entropy_coef=0.01, max_completion_length=64)
    assert plan.update.loss == LossSettings(
        policy_loss="clip", epsilon=0.1, epsilon_high=0.3, dual_clip=3.0, importance_level="token", ratio_cap=None,
        beta=0.04, kl_ratio_weighted=False, anchor_psi="luffy", anchor_gamma=0.2, aggregation="token_mean",
        max_completion_length=64, entropy_coef=0.01,
    )
    assert plan.update.loss.beta == 0.04 and plan.update.needs_reference is True  # β > 0: reference log-probs
    assert _plan().update.needs_reference is False
    assert _plan(loss_type="seq_mean_token_sum_norm").update.loss.aggregation == "seq_mean_token_sum_norm"
    assert _plan(beta=0.04, use_bias_correction_kl=True).update.loss.kl_ratio_weighted is True
    assert _plan(use_bias_correction_kl=True).update.loss.kl_ratio_weighted is False  # (no KL term: nothing to weight)


def test_gspo_preset_is_sequence_level():
    loss = _plan(algo="gspo").update.loss
    assert loss.importance_level == "sequence"
    assert (loss.epsilon, loss.epsilon_high) == (3e-4, 4e-4)


def test_loss_settings_are_what_the_loss_reads():
    # policy_loss takes the plan's LossSettings as one object; its only keywords are the per-row tensors.
    params = inspect.signature(policy_loss, eval_str=True).parameters
    positional = [p for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert len(positional) == 5 and positional[4].annotation is LossSettings
    keyword_only = {name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keyword_only == {"is_anchor", "ref_logprobs", "is_weights", "keep"}
    # Every field is read by the loss code (an attribute read in rlvr.core.losses or loss_variants, or in the update:
    # the aggregation, L_max, the entropy bonus and the token masks), none is carried for nothing.
    read = {node.attr for module in (losses_module, loss_variants_module, update_module)
            for node in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(node, ast.Attribute)}
    assert [f.name for f in dataclasses.fields(LossSettings) if f.name not in read] == []
    # And the objective accepts the plan's settings as they are (beta = 0: no reference needed).
    lp = torch.zeros(1, 2)
    out = policy_loss(lp, lp, torch.ones(1), torch.ones(1, 2, dtype=torch.bool), _plan().update.loss)
    assert torch.equal(out.per_token, -torch.ones(1, 2))


def test_tagrpo_dagrpo_dapo_combination():
    plan = _plan(algo="tagrpo", ratio_anchor="truncated_is", pair_masking=True, scorer="reward", anchors="failed",
                 dynamic_sampling=True, num_generations=4)
    assert plan.mode == "rl"
    # TA-GRPO, truncated IS
    assert plan.scoring_prompts == TRUNCATED_IS
    assert plan.rollout.rephrased is True
    assert plan.rollout.pooled is True
    assert plan.rollout.responses_per_prompt == 4
    assert plan.tagrpo_metrics is True
    assert plan.update.needs_old_logprobs is True
    assert plan.update.loss.ratio_cap == 2.0
    # DaGRPO
    assert plan.advantages.settings.estimator == "dagrpo"  # pair masking: the masked pairwise form
    assert plan.advantages.settings.tau == 0.2
    assert plan.advantages.settings.tau_kappa is None
    assert plan.advantages.settings.contrast == "reward"
    assert plan.advantages.report_pairs is True
    assert plan.dagrpo is not None and plan.dagrpo.anchors == "failed"
    # DAPO's dynamic sampling (not the dapo preset: clip range stays symmetric)
    assert plan.rollout.dynamic_sampling is True
    assert plan.rollout.max_rounds == 4
    assert plan.update.loss.epsilon_high is None
