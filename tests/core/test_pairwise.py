"""DaGRPO masked pairwise advantages (the ``dagrpo`` estimator of rlvr.core.advantages): every check
docs/algorithms/dagrpo.md lists, with hand arithmetic."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import build_config
from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, AdvantageSettings, pair_mask

G8 = torch.zeros(8, dtype=torch.long)


def masked_pairwise_advantages(rewards, scores, group_ids, *, stats_mask=None, **settings):
    """The ``dagrpo`` estimator on (rewards, scores, group ids) with AdvantageSettings(**settings)."""
    inputs = AdvantageInputs(rewards, group_ids, scores=scores, stats_mask=stats_mask)
    return ADVANTAGE_ESTIMATORS["dagrpo"](inputs, AdvantageSettings(estimator="dagrpo", **settings))


def grpo_advantages(rewards, group_ids, **settings):
    return ADVANTAGE_ESTIMATORS["grpo"](AdvantageInputs(rewards, group_ids), AdvantageSettings(**settings))


def test_worked_example_masking():
    # rewards [0,1,...,1]: unbiased std = sqrt(7/8 * 1/8 * 8/7) = sqrt(1/8) = 0.353553;
    # o_0 masked against o_1, o_2 only: Â_0 = 5 * (0-1) / (8 * 0.353553) = -1.767767;
    # o_1, o_2 lose their only contrast -> 0; o_3..o_7: (1-0)/(8*0.353553) = 0.353553.
    rewards = torch.tensor([0.0, 1, 1, 1, 1, 1, 1, 1])
    scores = torch.tensor([0.0, 0.1, 0.15, 0.9, 0.9, 0.9, 0.9, 0.9])
    adv = masked_pairwise_advantages(rewards, scores, G8, tau=0.2)
    mask = pair_mask(scores, G8, tau=0.2)
    expected = torch.tensor([-1.768, 0, 0, 0.354, 0.354, 0.354, 0.354, 0.354])
    torch.testing.assert_close(adv, expected, atol=1e-3, rtol=0)
    assert mask[0].tolist() == [False, False, False, True, True, True, True, True]


def test_worked_example_anchor():
    # all-wrong group of 8, one anchor (reward 1) replacing a rollout, tau = 0:
    # Â_anchor = 7 / (8 * 0.353553) = +2.474874, each wrong = -1 / (8 * 0.353553) = -0.353553.
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    adv = masked_pairwise_advantages(rewards, rewards, G8, tau=0.0)
    assert adv[0].item() == pytest.approx(2.474867, abs=1e-5)
    assert torch.equal(masked_pairwise_advantages(rewards, None, G8, tau=0.0), adv)  # no scores: s = r
    torch.testing.assert_close(adv[1:], torch.full((7,), -0.353553), atol=1e-5, rtol=0)


@given(st.lists(st.floats(0, 1), min_size=2, max_size=12), st.integers(1, 4), st.sampled_from(["group", "batch", "none"]))
@settings(max_examples=60, deadline=None)
def test_tau_zero_equals_grpo(values, groups, scale):
    rewards = torch.tensor(values, dtype=torch.float64)
    ids = torch.arange(len(values)) % groups
    adv = masked_pairwise_advantages(rewards, torch.rand(len(values), dtype=torch.float64), ids,
                                        tau=0.0, scale_rewards=scale)
    torch.testing.assert_close(adv, grpo_advantages(rewards, ids, scale_rewards=scale), rtol=1e-9, atol=1e-9)


@given(st.lists(st.floats(0, 1), min_size=2, max_size=12), st.lists(st.floats(0, 1), min_size=12, max_size=12),
       st.floats(0, 0.6), st.sampled_from(["reward", "score"]))
@settings(max_examples=60, deadline=None)
def test_advantages_sum_to_zero_in_each_group(values, scores, tau, contrast):
    n = len(values)
    rewards = torch.tensor(values, dtype=torch.float64)
    s = torch.tensor(scores[:n], dtype=torch.float64)
    ids = torch.arange(n) % 2
    adv = masked_pairwise_advantages(rewards, s, ids, tau=tau, contrast=contrast)
    mask = pair_mask(s, ids, tau=tau)
    assert torch.equal(mask, mask.T) and not mask.diagonal().any()
    for g in (0, 1):
        assert abs(float(adv[ids == g].sum())) < 1e-9


def test_equal_scores_pair_contributes_nothing():
    # o_0 and o_1 have equal scores, so their pair is masked however different their rewards:
    # Â_0 = [(1-0)*0 + (1-0)] / (3 * std) where only the pair (0,2) remains.
    rewards = torch.tensor([1.0, 0.0, 0.0])
    scores = torch.tensor([0.5, 0.5, 0.0])
    adv = masked_pairwise_advantages(rewards, scores, torch.zeros(3, dtype=torch.long), tau=0.1)
    mask = pair_mask(scores, torch.zeros(3, dtype=torch.long), tau=0.1)
    assert not mask[0, 1] and not mask[1, 0]
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # 0.57735
    assert adv[0].item() == pytest.approx(1 / (3 * (std + 1e-6)), rel=1e-6)
    assert adv[1].item() == 0.0
    assert adv[2].item() == pytest.approx(-1 / (3 * (std + 1e-6)), rel=1e-6)


def test_divides_by_group_size_not_by_unmasked_count():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    scores = torch.tensor([1.0, 0.95, 0.0, 0.0])  # pair (0,1) masked at tau 0.2
    adv = masked_pairwise_advantages(rewards, scores, torch.zeros(4, dtype=torch.long), tau=0.2,
                                        scale_rewards="none")
    assert adv[0].item() == pytest.approx(2 / 4)  # two unmasked contrasts of +1, over G = 4


def test_contrast_score_gives_signal_inside_all_correct_group():
    rewards = torch.ones(3)
    scores = torch.tensor([0.9, 0.5, 0.1])
    reward_adv = masked_pairwise_advantages(rewards, scores, torch.zeros(3, dtype=torch.long), tau=0.0)
    score_adv = masked_pairwise_advantages(rewards, scores, torch.zeros(3, dtype=torch.long), tau=0.0,
                                              contrast="score", scale_rewards="none")
    assert torch.equal(reward_adv, torch.zeros(3))
    # c = s: Â_0 = [(0.9-0.5) + (0.9-0.1)] / 3 = 0.4
    torch.testing.assert_close(score_adv, torch.tensor([0.4, 0.0, -0.4]), atol=1e-6, rtol=0)


def test_adaptive_tau_uses_group_score_std():
    scores = torch.tensor([0.0, 0.1, 1.0, 0.0, 0.1, 0.2])
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    mask = pair_mask(scores, ids, tau=99.0, tau_kappa=0.5)
    # group 0: std = 0.5508 -> tau 0.2754: (0,1) masked, (0,2) and (1,2) kept.
    # group 1: std = 0.1 -> tau 0.05: every gap >= 0.1 is kept.
    assert mask[0].tolist() == [False, False, True, False, False, False]
    assert mask[3].tolist() == [False, False, False, False, True, True]
    assert not mask[:3, 3:].any()


def test_stats_mask_leaves_anchor_out_of_the_std():
    # anchor_in_stats=false on an all-wrong group: the on-policy std is 0, so the group is not
    # scaled (instead of 1/eps): Â_anchor = 7/8, each wrong -1/8.
    rewards = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    keep = torch.tensor([False] + [True] * 7)
    adv = masked_pairwise_advantages(rewards, rewards, G8, tau=0.0, stats_mask=keep)
    torch.testing.assert_close(adv, torch.tensor([0.875] + [-0.125] * 7))
    # with a mixed on-policy part, sigma is their std: rewards [1 | 1,0,0,0]
    rewards = torch.tensor([1.0, 1, 0, 0, 0])
    keep = torch.tensor([False, True, True, True, True])
    adv = masked_pairwise_advantages(rewards, rewards, torch.zeros(5, dtype=torch.long), tau=0.0, stats_mask=keep)
    std = 0.5  # unbiased std of [1,0,0,0]
    assert adv[0].item() == pytest.approx(3 / (5 * (std + 1e-6)), rel=1e-6)


def test_group_of_one_and_bad_names():
    adv = masked_pairwise_advantages(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([3]), tau=0.2)
    assert adv.tolist() == [0.0]
    # option values are validated once, by the config
    with pytest.raises(ValueError, match="contrast"):
        build_config({"model": "tiny-random", "algo": "dagrpo", "contrast": "x"})


@pytest.mark.parametrize("value", [0.0, 0.1, 0.3, 0.7, 1 / 3, 0.65])
def test_adaptive_tau_on_equal_scores_masks_every_pair(value):
    # All scores equal: tau = kappa * std is 0 or a rounding residue (float32 std of equal values),
    # so `gap >= tau` used to keep or drop every pair by chance. Equal scores never form a pair.
    scores = torch.full((6,), value, dtype=torch.float32)
    rewards = torch.tensor([0.0, 1, 0, 1, 0, 1])  # different rewards: a kept pair would carry a contrast
    ids = torch.zeros(6, dtype=torch.long)
    assert not pair_mask(scores, ids, tau=0.0, tau_kappa=1.0).any()
    adv = masked_pairwise_advantages(rewards, scores, ids, tau=0.0, tau_kappa=1.0)
    assert torch.equal(adv, torch.zeros(6))


def test_a_gap_equal_to_tau_is_kept_despite_rounding():
    # 0.7 - 0.5 = 0.19999999999999996 in float64 (and 0.20000005 in float32): both are |d| = tau.
    for dtype in (torch.float32, torch.float64):
        scores = torch.tensor([0.5, 0.7, 0.9], dtype=dtype)
        mask = pair_mask(scores, torch.zeros(3, dtype=torch.long), tau=0.2)
        assert mask.tolist() == [[False, True, True], [True, False, True], [True, True, False]], dtype
    # scores that sum to tau through alpha·r + (1-alpha)·q, as the trainer computes them
    s = torch.tensor([0.5 * 1 + 0.5 * 0.3, 0.5 * 0 + 0.5 * 0.9], dtype=torch.float32)  # 0.65, 0.45
    assert pair_mask(s, torch.zeros(2, dtype=torch.long), tau=0.2)[0, 1]
    # a gap clearly below tau is still masked
    assert not pair_mask(torch.tensor([0.5, 0.6999]), torch.zeros(2, dtype=torch.long), tau=0.2).any()


def test_equal_scores_with_different_rewards_never_contribute_even_at_tau_zero():
    rewards = torch.tensor([1.0, 0.0, 0.0])
    scores = torch.tensor([0.4, 0.4, 0.1])  # o_0 and o_1 tie in score but differ in reward
    adv = masked_pairwise_advantages(rewards, scores, torch.zeros(3, dtype=torch.long), tau=0.0)
    # only (0, 2) contributes: std(r) = 0.57735; Â_0 = (1-0)/(3·0.57735) = 0.57735, Â_2 = -0.57735
    torch.testing.assert_close(adv, torch.tensor([0.57735, 0.0, -0.57735]), atol=1e-5, rtol=0)
