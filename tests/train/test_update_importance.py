"""The sampler/trainer importance-sampling correction in the update: gradient, metrics, anchors, TA-GRPO."""

import dataclasses
import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import Completion
from rlvr.train.experience import Experience
from rlvr.train.plan import ISCorrection, compile_plan
from rlvr.train.rollout_phase import Group
from rlvr.train.tagrpo import LogprobPrompts
from rlvr.train.update import PolicyUpdate

from .test_update import ADVANTAGES, NoScheduler, RecordingOptimizer, _experience

C_MIN, C_MAX = 0.6, 1.5  # log 0.6 = −0.51, log 1.5 = 0.41: offsets of ±0.3 pass, ±0.6 do not (wide margins)
IS_METRICS = ("rollout/is_ratio_mean", "rollout/is_ratio_min", "rollout/is_ratio_max", "rollout/is_clipped_frac")


def _offset(row: int, t: int) -> float:
    """d_t = log π_old − log π_sampler put into the sampler's log-probs: one of −0.6, −0.3, 0, 0.3, 0.6."""
    return 0.3 * ((row + 2 * t) % 5 - 2)


def _logp(model, prompt, response, *, grad=False) -> torch.Tensor:
    """[|o|] log π(o_t | prompt, o_<t) at temperature 1, one sequence, no padding."""
    with torch.set_grad_enabled(grad):
        logits = model(input_ids=torch.tensor([list(prompt) + list(response)])).logits[0, len(prompt) - 1 : -1]
        return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(list(response))[:, None]).squeeze(-1)


def _perturbed(exp: Experience, model, prompts=None) -> Experience:
    """``exp`` with the sampler's log-probs = the trainer's (on ``prompts``, default the sampled ones) − offsets."""
    prompts = prompts if prompts is not None else exp.sampled_prompt_ids
    sampled = [[] if exp.is_anchor[i] else
               [float(x) - _offset(i, t) for t, x in enumerate(_logp(model, prompts[i], exp.response_ids[i]))]
               for i in range(len(exp))]
    return dataclasses.replace(exp, sampling_logprobs=sampled)


def _hand_weights(exp: Experience, mode: str) -> list[list[float]]:
    """The formula's w_t per response, from the offsets alone (C_min = 0.6, C_max = 1.5)."""
    out = []
    for i, response in enumerate(exp.response_ids):
        d = [_offset(i, t) for t in range(len(response))]
        ratios = [math.exp(x) for x in d] if mode.startswith("token") else [math.exp(sum(d))] * len(d)
        if mode.endswith("truncate"):
            out.append([min(max(r, C_MIN), C_MAX) for r in ratios])
        else:
            out.append([r if C_MIN <= r <= C_MAX else 0.0 for r in ratios])
    return out


def _cfg(**extra):
    return build_config({"model": "tiny-random", "loss_type": "token_mean", "prompts_per_step": 3,
                         "num_generations": 4, "max_completion_length": 8, "max_grad_norm": 0, **extra})


def _run(settings, exp, advantages=ADVANTAGES, *, ref_model=None):
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    opt = RecordingOptimizer(model.parameters())
    update = PolicyUpdate(settings, model, opt, NoScheduler(), pad_token_id=tok.pad_token_id, ref_model=ref_model)
    result = update(exp, advantages)
    return opt.grads[0], result.metrics(with_kl=settings.needs_reference)


def _on(mode, **extra):
    return _cfg(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=mode,
                vllm_importance_sampling_clip_min=C_MIN, vllm_importance_sampling_clip_max=C_MAX, **extra)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_gradient_is_the_weighted_hand_loss(mode):
    # token_mean, on-policy (ρ = 1), β = 0.1: L = Σ_i Σ_t [w_it·(−A_i·ρ_it) + β·KL_it] / Σ_i |o_i|
    # with w from the offsets (TRL: the weight multiplies the policy term, then β·KL is added unweighted)
    beta = 0.1
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    ref, _ = tiny_random_model_and_tokenizer(seed=1)
    exp = _perturbed(_experience(), model)
    grads, metrics = _run(compile_plan(_on(mode, beta=beta)).update, exp, ref_model=ref)

    weights = _hand_weights(exp, mode)
    total = sum(len(r) for r in exp.response_ids)
    loss = 0.0
    for i, (prompt, response, advantage) in enumerate(zip(exp.prompt_ids, exp.response_ids, ADVANTAGES)):
        logp = _logp(model, prompt, response, grad=True)
        ref_logp = _logp(ref, prompt, response)
        kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        surrogate = -advantage * torch.exp(logp - logp.detach())
        loss = loss + (torch.tensor(weights[i]) * surrogate + beta * kl).sum() / total
    loss.backward()
    for got, p in zip(grads, model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-6)

    # the metrics: raw ratios over tokens (sequences for sequence modes), and the tokens truncated or masked
    d = [[_offset(i, t) for t in range(len(r))] for i, r in enumerate(exp.response_ids)]
    raw = [math.exp(x) for row in d for x in row] if mode.startswith("token") else [math.exp(sum(row)) for row in d]
    per_token = [math.exp(x) if mode.startswith("token") else math.exp(sum(row)) for row in d for x in row]
    adjusted = sum(not C_MIN <= r <= C_MAX for r in per_token)
    assert 0 < adjusted < total  # the offsets exercise the bounds
    expected = {"rollout/is_ratio_mean": sum(raw) / len(raw), "rollout/is_ratio_min": min(raw),
                "rollout/is_ratio_max": max(raw), "rollout/is_clipped_frac": adjusted / total}
    assert {k: metrics[k] for k in IS_METRICS} == pytest.approx(expected, rel=1e-4)


def test_off_reads_no_sampler_log_probs_and_changes_nothing():
    # rollout_engine=rlvr (the default): off. The update is the one without the correction, bit for bit,
    # whatever the sampler's log-probs are; its metrics are None.
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    default = compile_plan(_cfg()).update
    assert default.is_correction is None
    assert compile_plan(_cfg(vllm_importance_sampling_correction=False, rollout_engine="vllm")).update.is_correction is None
    plain, metrics = _run(default, _experience())
    assert all(metrics[k] is None for k in IS_METRICS)
    for settings, exp in ((default, _perturbed(_experience(), model)),
                          (dataclasses.replace(default, is_correction=None), _experience())):
        grads, _ = _run(settings, exp)
        assert all(torch.equal(a, b) for a, b in zip(plain, grads))
    # on, with C_max below every ratio's raw value in masking mode, the sampled tokens' weights are 0: different
    on = dataclasses.replace(default, is_correction=ISCorrection("token_mask", clip_min=None, clip_max=1e-9))
    masked, metrics = _run(on, _experience())
    assert all(float(g.abs().max()) == 0.0 for g in masked) and metrics["rollout/is_clipped_frac"] == 1.0


def test_no_update_metrics_name_the_is_metrics():
    from rlvr.train.metrics import UpdateResult

    assert all(UpdateResult.no_update_metrics(0.0)[k] is None for k in IS_METRICS)


def test_anchors_get_weight_one():
    # an anchor (expert response: no sampling log-probs) and a sampled response with advantage 0: only the
    # anchor carries a gradient, and the correction must leave it alone
    prompt = [10, 11, 12]
    group = Group(group_id=1, row={"id": "x"}, prompt_ids=prompt,
                  completions=[Completion([40, 41, 42, 257], [], False, is_anchor=True),
                               Completion([50, 51], [-12.0, -12.0], False)],
                  texts=["", ""], rewards=[1.0, 0.0])
    exp = Experience.from_groups([group])
    advantages = torch.tensor([2.0, 0.0])
    off = compile_plan(_cfg()).update
    on = dataclasses.replace(off, is_correction=ISCorrection("token_truncate", clip_min=None, clip_max=None))
    plain, _ = _run(off, exp, advantages)
    corrected, metrics = _run(on, exp, advantages)
    assert all(torch.equal(a, b) for a, b in zip(plain, corrected))
    # the statistics are the sampled response's two tokens only (its ratios are e^(logp + 12), far above 1)
    assert metrics["rollout/is_ratio_min"] > 100 and metrics["rollout/is_clipped_frac"] == 0.0


def _tagrpo_group() -> Group:
    # one pool: q_0 and a rephrasing q_1, two responses each (variants 0, 0, 1, 1)
    q0, q1 = [10, 11, 12], [20, 21, 22, 23, 24]
    responses = [[50, 51, 52], [60, 61], [70, 71, 72, 73], [80, 81, 82]]
    group = Group(group_id=1, row={"id": "x"}, prompt_ids=q0,
                  completions=[Completion(r, [0.0] * len(r), False) for r in responses],
                  texts=[""] * 4, rewards=[1.0, 0.0, 1.0, 0.0], variants=[0, 0, 1, 1], variant_prompt_ids=[q0, q1])
    return group


@pytest.mark.parametrize("ratio_anchor", ["original", "truncated_is", "unanchored"])
def test_tagrpo_ratio_uses_the_prompt_the_response_was_sampled_from(ratio_anchor):
    # the sampler's log-probs are π(o | q_j) − offsets; whatever prompt the policy (and old) score o on,
    # the IS ratio is exp(offset): π_old(o | q_j) / π_sampler(o | q_j)
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    exp = Experience.from_groups([_tagrpo_group()], LogprobPrompts.for_ratio_anchor(ratio_anchor))
    assert exp.sampled_prompt_ids[2] != exp.prompt_ids[2] or ratio_anchor == "unanchored"
    exp = _perturbed(exp, model)
    cfg = _on("token_truncate", algo="tagrpo", num_generations=2, prompts_per_step=1, ratio_anchor=ratio_anchor)
    advantages = torch.tensor([0.5, -0.5, 0.7, -0.7])
    grads, metrics = _run(compile_plan(cfg).update, exp, advantages)
    raw = [math.exp(_offset(i, t)) for i, r in enumerate(exp.response_ids) for t in range(len(r))]
    assert metrics["rollout/is_ratio_mean"] == pytest.approx(sum(raw) / len(raw), rel=1e-4)
    assert metrics["rollout/is_ratio_min"] == pytest.approx(min(raw), rel=1e-4)
    assert metrics["rollout/is_ratio_max"] == pytest.approx(max(raw), rel=1e-4)
    if ratio_anchor == "original":  # on-policy on q_0: L = Σ_i Σ_t w_it·(−A_i·ρ_it(q_0)) / Σ_i |o_i|
        weights = _hand_weights(exp, "token_truncate")
        total = sum(len(r) for r in exp.response_ids)
        loss = 0.0
        for i, (prompt, response) in enumerate(zip(exp.prompt_ids, exp.response_ids)):
            logp = _logp(model, prompt, response, grad=True)
            loss = loss + (torch.tensor(weights[i]) * -advantages[i] * torch.exp(logp - logp.detach())).sum() / total
        loss.backward()
        for got, p in zip(grads, model.parameters()):
            torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("overrides", "on"), [
    ({}, False),
    ({"rollout_engine": "hf"}, False),
    ({"rollout_engine": "vllm"}, True),
    ({"rollout_engine": "vllm", "vllm_importance_sampling_correction": False}, False),
    ({"vllm_importance_sampling_correction": True}, True),
])
def test_auto_rule(overrides, on):
    # null (the default): on for rollout_engine=vllm, off for rlvr/hf; true/false force it for any engine
    settings = compile_plan(build_config({"model": "tiny-random", **overrides})).update
    assert (settings.is_correction is not None) is on
    if on:
        assert settings.is_correction == ISCorrection(mode="sequence_mask", clip_min=None, clip_max=3.0)


def test_settings_come_from_the_vllm_section():
    cfg = _on("token_mask")
    assert compile_plan(cfg).update.is_correction == ISCorrection("token_mask", clip_min=C_MIN, clip_max=C_MAX)
