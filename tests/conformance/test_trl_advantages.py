"""rlvr's advantages, rollout metrics and importance weights against TRL 1.16's own
``GRPOTrainer._generate_and_score_completions``.

TRL's method runs as in training (the model in train mode), with only the sampler replaced: the
trainer's ``_generate_single_turn`` returns fixed completions (and, for the vLLM correction, sampler
log-probs). TRL's own ``_generate`` (length metrics), ``_calculate_rewards`` (the two reward functions
below, None included) and its advantage and metric code run unchanged. rlvr gets the same completions
and reward functions through its own path: ``Rewarder.reward_groups`` → ``Experience.from_groups`` →
``compute_advantages`` (eps = 1e-4, TRL's), ``trl_rollout_metrics`` and ``importance_weights``.
"""

import math

import pytest
import torch

from rlvr.core.advantages import AdvantageSettings
from rlvr.core.importance import importance_weights
from rlvr.rollout.completion import Completion
from rlvr.train.batching import collate, response_logprobs
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.metrics import trl_rollout_metrics
from rlvr.train.plan import AdvantagePlan
from rlvr.train.rewarding import Rewarder
from rlvr.train.rollout_phase import Group

from .conftest import GENERATIONS, TEMPERATURE, make_trl_trainer

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

EOS = 257
N = None
# Per completion, 5 groups of 4: a uniform group; a None from `correct` (still scored by `formatted`);
# a completion both functions return None for (unrewarded); a spread group; a uniform group of 0.3/0.1.
REWARDS = {
    "correct": [1, 1, 1, 1, 1, 0, N, 1, 0, N, 1, 0, 0.2, 0.9, 0.4, 0.0, 0.3, 0.3, 0.3, 0.3],
    "formatted": [.5, .5, .5, .5, 0, 1, 1, 0, 1, N, 0, .25, 1, 0, .5, 1, 0.1, 0.1, 0.1, 0.1],
}
# completions: ended by EOS or cut at max_completion_length (8 tokens, no EOS: truncated)
COMPLETIONS = [[65, 66, EOS], [65, EOS], [66, 67, 68, 69, 70, 71, 72, 73], [70, EOS]] * 5
# log π_old − log π_sampler per token (row pattern): ratios exp(d) in and out of [0.5, 2], sums too
SAMPLER_SHIFT = [[0.2, -0.9, 0.1], [0.8, 0.05], [0.1, 0.1, 0.2, -0.1, 0.3, 0.1, 0.2, 0.1], [-0.05, 0.02]]
IS_CLIP = dict(clip_min=0.5, clip_max=2.0)
NAN_TOKEN = (5, 0)  # vLLM gave no log-prob for this token (None): TRL and rlvr take ratio 1 there


def correct(completions, **kwargs):
    return list(REWARDS["correct"][: len(completions)])


def formatted(completions, **kwargs):
    return list(REWARDS["formatted"][: len(completions)])


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trainer = make_trl_trainer(tmp_path_factory.mktemp("trl_adv"), [correct, formatted])
    trainer.model.train()  # mode == "train" in _generate_and_score_completions
    return trainer


def _sampler(trainer, completions, monkeypatch, *, with_logprobs: bool) -> None:
    """Replace only TRL's sampler: fixed completions, and sampler log-probs = the model's own − SAMPLER_SHIFT."""
    pad = trainer.processing_class.pad_token_id

    def fixed_completions(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        assert len(prompt_ids) == len(completions)
        if not with_logprobs:
            return [list(c) for c in completions], None
        with torch.no_grad():
            current, _ = response_logprobs(trainer.model, collate(prompt_ids, completions, pad_token_id=pad),
                                           temperature=TEMPERATURE)
        logprobs = [[float(current[i, t]) - SAMPLER_SHIFT[i % 4][t] for t in range(len(c))]
                    for i, c in enumerate(completions)]
        logprobs[NAN_TOKEN[0]][NAN_TOKEN[1]] = None
        return [list(c) for c in completions], logprobs

    monkeypatch.setattr(trainer, "_generate_single_turn", fixed_completions)


def _trl_generation(trainer, monkeypatch, *, scale_rewards: str, weights: list[float], groups: int = 5):
    """TRL's own _generate_and_score_completions on ``groups`` prompts × num_generations: (output, metrics)."""
    g = trainer.num_generations
    _sampler(trainer, COMPLETIONS[: groups * g], monkeypatch, with_logprobs=False)
    monkeypatch.setattr(trainer, "scale_rewards", scale_rewards)
    monkeypatch.setattr(trainer, "reward_weights", torch.tensor(weights, dtype=torch.float32))
    trainer._metrics["train"].clear()
    output = trainer._generate_and_score_completions([{"prompt": f"q{k}"} for k in range(groups) for _ in range(g)])
    return output, {name: values[-1] for name, values in trainer._metrics["train"].items()}


def _rlvr_groups(weights: list[float], *, groups: int = 5, size: int = GENERATIONS) -> tuple[list[Group], list[str]]:
    """The same completions as rlvr's Groups, rewarded by rlvr's Rewarder (TRL's reward-function signature)."""
    rewarder = Rewarder([correct, formatted], weights, verifier_workers=1, verifier_timeout=5.0,
                        answer_extraction="flexible")
    try:
        out = [Group(group_id=k, row={"prompt": f"q{k}"}, prompt_ids=[113, 48 + k],
                     completions=[Completion(list(c), [], truncated=c[-1] != EOS)
                                  for c in COMPLETIONS[k * size: (k + 1) * size]],
                     texts=[""] * size) for k in range(groups)]
        rewarder.reward_groups(out)
        return out, rewarder.names
    finally:
        rewarder.close()


def _rlvr_advantages(groups: list[Group], scale_rewards: str) -> torch.Tensor:
    plan = AdvantagePlan(settings=AdvantageSettings(estimator="grpo", scale_rewards=scale_rewards, eps=1e-4),
                         anchor_in_stats=False, report_pairs=False)
    advantages, _ = compute_advantages(plan, Experience.from_groups(groups))
    return advantages


def _nan_as_none(value):
    return None if isinstance(value, float) and math.isnan(value) else value


@pytest.mark.parametrize("weights", [[1.0, 0.5], [2.0, -1.0]], ids=["w1-0.5", "w2--1"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_the_advantages_and_rollout_metrics_are_trls(trainer, monkeypatch, scale_rewards, weights):
    """TRL's own _generate_and_score_completions (sum_then_normalize, TRL's default) = rlvr's compute_advantages
    (eps 1e-4) for a uniform group, a None reward, an unrewarded completion and two weighted functions;
    TRL's logged reward/, completions/ and frac_reward_zero_std metrics = rlvr's trl_rollout_metrics."""
    output, trl_metrics = _trl_generation(trainer, monkeypatch, scale_rewards=scale_rewards, weights=weights)
    groups, names = _rlvr_groups(weights)
    torch.testing.assert_close(_rlvr_advantages(groups, scale_rewards), output["advantages"], rtol=1e-6, atol=1e-6)
    ours = trl_rollout_metrics(groups, names, scale_rewards=scale_rewards)
    expected = {name: _nan_as_none(trl_metrics[name]) for name in ours}  # TRL's NaN (nanstd of < 2 values) is None
    assert ours == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert {"reward", "reward_std", "frac_reward_zero_std", "rewards/correct/mean", "rewards/formatted/std",
            "completions/mean_length", "completions/clipped_ratio", "completions/mean_terminated_length"} <= set(ours)


def test_a_uniform_group_of_three_non_dyadic_rewards_departs_from_trls_float32_noise(trainer, monkeypatch):
    """A deliberate departure (docs/from_trl.md, "Where the numbers differ"): TRL takes the group mean and std
    in float32, so three rewards of 0.45 give a std of ~3.7e-8, advantages of ~3e-4 and frac_reward_zero_std 0;
    rlvr gives a group whose rewards are equal advantage exactly 0 and counts it as zero-std. TRL's own
    _generate_and_score_completions with num_generations = 3 shows the noise; rlvr's numbers are the exact ones."""
    monkeypatch.setattr(trainer, "num_generations", 3)
    monkeypatch.setitem(REWARDS, "correct", [0.45, 0.45, 0.45])
    monkeypatch.setitem(REWARDS, "formatted", [N, N, N])
    output, trl_metrics = _trl_generation(trainer, monkeypatch, scale_rewards="group", weights=[1.0, 1.0], groups=1)
    groups, names = _rlvr_groups([1.0, 1.0], groups=1, size=3)
    ours = trl_rollout_metrics(groups, names, scale_rewards="group")
    assert 0 < output["advantages"].abs().max() < 1e-3 and trl_metrics["frac_reward_zero_std"] == 0.0  # TRL's noise
    assert torch.equal(_rlvr_advantages(groups, "group"), torch.zeros(3, dtype=_rlvr_advantages(groups, "group").dtype))
    assert ours["frac_reward_zero_std"] == 1.0


def _trl_importance(trainer, monkeypatch, mode: str):
    """TRL's own vLLM importance-sampling ratio: _generate_and_score_completions with use_vllm and the correction."""
    _sampler(trainer, COMPLETIONS[:8], monkeypatch, with_logprobs=True)
    for name, value in {"use_vllm": True, "vllm_importance_sampling_correction": True, "beta": 0.0,
                        "vllm_importance_sampling_mode": mode,
                        "vllm_importance_sampling_clip_min": IS_CLIP["clip_min"],
                        "vllm_importance_sampling_clip_max": IS_CLIP["clip_max"]}.items():
        monkeypatch.setattr(trainer, name, value)
    trainer._metrics["train"].clear()
    output = trainer._generate_and_score_completions([{"prompt": f"q{k}"} for k in range(2) for _ in range(4)])
    mask = output["completion_mask"].bool()
    sampled = output["sampling_per_token_logps"]
    correction = importance_weights(output["old_per_token_logps"], sampled, mask, mode=mode, **IS_CLIP)
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    return output, mask, correction, metrics


IS_MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


@pytest.mark.parametrize("mode", IS_MODES)
def test_the_importance_weights_are_trls(trainer, monkeypatch, mode):
    """TRL's own importance_sampling_ratio (from its old_per_token_logps and the sampler's log-probs, a None
    among them) = rlvr's importance_weights, on every completion token; some tokens are truncated/masked."""
    output, mask, correction, _ = _trl_importance(trainer, monkeypatch, mode)
    trl_ratio = output["importance_sampling_ratio"].expand_as(mask)  # sequence modes: [B, 1]
    torch.testing.assert_close(correction.weights[mask], trl_ratio[mask].to(correction.weights.dtype),
                               rtol=1e-6, atol=1e-6)
    assert bool(correction.adjusted.any())
    assert math.isnan(output["sampling_per_token_logps"][NAN_TOKEN].item())


@pytest.mark.parametrize("mode", IS_MODES)
def test_the_importance_ratio_metrics_are_trls(trainer, monkeypatch, mode):
    """TRL's own sampling/importance_sampling_ratio/{min,mean,max} (the weights after truncation or masking) =
    rlvr's rollout/is_weight_* (ISWeights.stats() reduced as train/update.py reduces them: weight_sum / units,
    weight_min, weight_max; metrics.SAMPLING_METRICS gives them TRL's names)."""
    _, _, correction, metrics = _trl_importance(trainer, monkeypatch, mode)
    stats = correction.stats()
    ours = {"min": float(stats["weight_min"]), "mean": float(stats["weight_sum"] / stats["units"]),
            "max": float(stats["weight_max"])}
    theirs = {name: metrics[f"sampling/importance_sampling_ratio/{name}"] for name in ours}
    assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-6)
