"""experience.py: groups flattened into an Experience, its subsets and padding, and compute_advantages' routing
(estimator, anchors, unrewarded responses, DaGRPO's pair metrics), each against hand arithmetic."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core.advantages import AdvantageSettings
from rlvr.rollout import Completion
from rlvr.train.batching import minibatches, pad_rows
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.plan import AdvantagePlan
from rlvr.train.rollout_phase import Group
from rlvr.train.tagrpo import LogprobPrompts


def _group(gid: int, rewards: list[float], *, anchors: tuple[int, ...] = (), **fields) -> Group:
    completions = [Completion([gid, i + 1], [] if i in anchors else [-0.5, -0.5], truncated=i == 1,
                              is_anchor=i in anchors) for i in range(len(rewards))]
    return Group(group_id=gid, row={"id": str(gid)}, prompt_ids=[7, gid], completions=completions,
                 texts=[f"t{gid}.{i}" for i in range(len(rewards))], rewards=list(rewards), **fields)


def _plan(estimator: str = "grpo", scale: str = "group", *, anchor_in_stats: bool = True, report_pairs: bool = False,
          tau: float = 0.0) -> AdvantagePlan:
    return AdvantagePlan(AdvantageSettings(estimator=estimator, scale_rewards=scale, tau=tau),
                         anchor_in_stats=anchor_in_stats, report_pairs=report_pairs)


# group 1: [1, 0, 0, 1]: mean 0.5, unbiased σ = sqrt(4·0.25/3) = sqrt(1/3); group 2: [0.2, 0.8]: mean 0.5,
# σ = sqrt(2·0.09/1) = sqrt(0.18); the batch's six rewards: mean 0.5, σ = sqrt((4·0.25 + 2·0.09)/5) = sqrt(0.236)
CENTRED = [0.5, -0.5, -0.5, 0.5, -0.3, 0.3]
GROUP_SIGMA = [math.sqrt(1 / 3)] * 4 + [math.sqrt(0.18)] * 2
BATCH_SIGMA = [math.sqrt(0.236)] * 6
SIZE = [4] * 4 + [2] * 2


@pytest.mark.parametrize(("estimator", "scale", "expected"), [
    ("grpo", "group", [c / (s + 1e-6) for c, s in zip(CENTRED, GROUP_SIGMA)]),
    ("grpo", "batch", [c / (s + 1e-6) for c, s in zip(CENTRED, BATCH_SIGMA)]),
    ("grpo", "none", CENTRED),
    ("rloo", "group", [c * g / (g - 1) / (s + 1e-6) for c, s, g in zip(CENTRED, GROUP_SIGMA, SIZE)]),
])
def test_advantages_are_the_configured_estimator_over_each_group(estimator, scale, expected):
    """compute_advantages runs the plan's estimator and scale: (r − group mean) [× G/(G−1)] ÷ (σ + ε)."""
    exp = Experience.from_groups([_group(1, [1.0, 0.0, 0.0, 1.0]), _group(2, [0.2, 0.8])])
    advantages, metrics = compute_advantages(_plan(estimator, scale), exp)
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=0)
    assert advantages.dtype == torch.float32 and metrics == {}  # no pair metrics without DaGRPO


def test_a_uniform_group_gets_exactly_zero_next_to_a_mixed_one():
    """A group whose rewards are all equal carries no signal: its advantages are exactly 0, not ~1e-7."""
    exp = Experience.from_groups([_group(1, [0.3, 0.3, 0.3]), _group(2, [1.0, 0.0])])
    advantages, _ = compute_advantages(_plan(), exp)
    assert advantages[:3].tolist() == [0.0, 0.0, 0.0]
    assert advantages[3] > 0 > advantages[4]


@pytest.mark.parametrize(("anchor_in_stats", "expected"), [
    # σ of [0, 0, 0, 1] (anchor in) = sqrt(0.75/3) = 0.5; Σ_j (c_i − c_j) / G = −1/4 (samples), 3/4 (anchor)
    (True, [-0.25 / 0.5, -0.25 / 0.5, -0.25 / 0.5, 0.75 / 0.5]),
    # σ over the samples [0, 0, 0] is 0: the group is left unscaled (σ + ε → 1), not blown up by 1/ε
    (False, [-0.25, -0.25, -0.25, 0.75]),
])
def test_a_batch_with_an_anchor_uses_the_pairwise_form_whatever_the_estimator(anchor_in_stats, expected):
    """An anchor switches to DaGRPO's pairwise advantages (rloo's G/(G−1) would give −2/3 here), with the anchor's
    reward in σ or not as ``anchor_in_stats`` says."""
    exp = Experience.from_groups([_group(1, [0.0, 0.0, 0.0, 1.0], anchors=(3,))])
    advantages, _ = compute_advantages(_plan("rloo", anchor_in_stats=anchor_in_stats), exp)
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=0)


def test_pair_metrics_count_the_pairs_the_mask_removed():
    """DaGRPO's metrics at τ = 0.5. Group 1 (scores 0, 0.3, 1): of its 6 ordered pairs the two 0↔0.3 are masked,
    both contrasting; group 2 (1, 1): its 2 pairs are equal, masked, not contrasting. Masked 4 of 8 pairs, 2 of
    the 6 contrasting ones; group 2's two advantages are 0 (2 of 5)."""
    exp = Experience.from_groups([_group(1, [0.0, 0.3, 1.0]), _group(2, [1.0, 1.0])])
    advantages, metrics = compute_advantages(_plan("dagrpo", report_pairs=True, tau=0.5), exp)
    assert metrics == pytest.approx({"dagrpo/masked_pair_frac": 0.5, "dagrpo/masked_contrast_frac": 2 / 6,
                                     "dagrpo/zero_adv_frac": 0.4})
    sigma = math.sqrt(((0 - 1.3 / 3) ** 2 + (0.3 - 1.3 / 3) ** 2 + (1 - 1.3 / 3) ** 2) / 2)
    # Σ_j m_ij (r_i − r_j): 0 keeps only its pair with 1 (−1), 0.3 likewise (−0.7), 1 both (1 + 0.7)
    expected = [-1.0 / (3 * sigma), -0.7 / (3 * sigma), 1.7 / (3 * sigma), 0.0, 0.0]
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=0)


def test_no_rewarded_response_gives_zero_advantages_and_the_same_metric_keys():
    """A step where every function returned None: all advantages 0; a DaGRPO run still logs its three keys."""
    exp = Experience.from_groups([_group(1, [0.0, 0.0], rewarded=[False, False])])
    advantages, metrics = compute_advantages(_plan(report_pairs=True), exp)
    assert advantages.tolist() == [0.0, 0.0]
    assert metrics == {"dagrpo/masked_pair_frac": 0.0, "dagrpo/masked_contrast_frac": 0.0, "dagrpo/zero_adv_frac": 1.0}
    assert compute_advantages(_plan(), exp)[1] == {}


def test_zero_advantage_fraction_counts_the_unrewarded_responses_too():
    """With some responses unrewarded the statistics use the rewarded ones ([1, 0]: ±1/sqrt(0.5)), but
    zero_adv_frac is over the whole batch: the unrewarded one and the uniform group's two are 3 of 5 (the
    rewarded subset alone would say 2 of 4)."""
    groups = [_group(1, [1.0, 0.0, 0.0], rewarded=[True, True, False]), _group(2, [1.0, 1.0])]
    advantages, metrics = compute_advantages(_plan(report_pairs=True), Experience.from_groups(groups))
    half = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(advantages, torch.tensor([half, -half, 0.0, 0.0, 0.0]), atol=1e-5, rtol=0)
    assert metrics["dagrpo/zero_adv_frac"] == pytest.approx(0.6)
    assert metrics["dagrpo/masked_pair_frac"] == pytest.approx(0.5)  # τ = 0: only group 2's equal pair (2 of 4)


def test_from_groups_flattens_in_group_order_with_each_pass_s_prompt():
    """TA-GRPO's truncated_is scores the policy and reference on q_0 and the behaviour policy on the q_j each
    response came from; ids, pools, variants, scores (= rewards when unset) and flags follow the responses."""
    q0, q1, q2 = [7, 1], [8, 1], [9, 1]
    pooled = _group(1, [1.0, 0.0, 0.5], variants=[0, 1, 2], variant_prompt_ids=[q0, q1, q2], pool_id=40)
    plain = _group(2, [0.0, 1.0], scores=[0.25, 0.75], rewarded=[True, False])
    exp = Experience.from_groups([pooled, plain], LogprobPrompts.for_ratio_anchor("truncated_is"))
    assert len(exp) == 5
    assert exp.group_ids.tolist() == [1, 1, 1, 2, 2] and exp.pool_ids.tolist() == [40, 40, 40, 2, 2]
    assert exp.variants.tolist() == [0, 1, 2, 0, 0]
    assert exp.prompt_ids == [q0, q0, q0, [7, 2], [7, 2]] and exp.reference_prompt_ids == exp.prompt_ids
    assert exp.behaviour_prompt_ids == [q0, q1, q2, [7, 2], [7, 2]] == exp.sampled_prompt_ids
    assert exp.on_own_prompt.tolist() == [True, False, False, True, True]
    assert exp.response_ids == [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2]]
    assert exp.truncated.tolist() == [False, True, False, False, True]
    torch.testing.assert_close(exp.rewards, torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0]))
    torch.testing.assert_close(exp.scores, torch.tensor([1.0, 0.0, 0.5, 0.25, 0.75]))
    assert exp.rewarded.tolist() == [True, True, True, True, False]
    unanchored = Experience.from_groups([pooled], LogprobPrompts.for_ratio_anchor("unanchored"))
    assert unanchored.prompt_ids == [q0, q1, q2] and unanchored.on_own_prompt.tolist() == [True, True, True]


def test_subset_filters_every_per_response_field_alike():
    """subset(keep) keeps tensors and lists aligned (the rows where keep is True) and the groups whole."""
    groups = [_group(1, [1.0, 0.0, 0.5], anchors=(2,)), _group(2, [0.2, 0.4])]
    exp = Experience.from_groups(groups)
    part = exp.subset(torch.tensor([False, True, True, False, True]))
    assert len(part) == 3 and part.groups is exp.groups
    assert part.response_ids == [[1, 2], [1, 3], [2, 2]] and part.sampling_logprobs == [[-0.5, -0.5], [], [-0.5, -0.5]]
    assert part.group_ids.tolist() == [1, 1, 2] and part.is_anchor.tolist() == [False, True, False]
    torch.testing.assert_close(part.rewards, torch.tensor([0.0, 0.5, 0.4]))


def test_group_views_leave_out_anchors_and_unrewarded_responses():
    """on_policy skips anchors; uniform ignores unrewarded values; correct reads the correctness reward when there
    is one (else total > 0); generation_prompt is q_j; a snapshot's lists are copies; policy_samples is the
    group before an anchor went in."""
    group = _group(1, [1.0, 0.5, 0.0], anchors=(2,), rewarded=[True, True, False],
                   reward_parts={"acc": [1.0, 0.0, None]}, variants=[0, 1, 0], variant_prompt_ids=[[7, 1], [8, 1]])
    assert group.on_policy == [0, 1] and group.generation_prompt(1) == [8, 1] and group.generation_prompt(0) == [7, 1]
    assert group.correct == [True, True, False]  # no correctness reward: total > 0
    group.correctness = "acc"
    assert group.correct == [True, False, False]  # acc == 1.0 only
    assert _group(2, [1.0, 1.0, 0.0], rewarded=[True, True, False]).uniform
    assert not group.uniform and group.policy_samples is group
    before = group.snapshot()
    group.rewards[0], group.reward_parts["acc"][0], group.rewarded[0] = 9.0, 9.0, False
    assert (before.rewards[0], before.reward_parts["acc"][0], before.rewarded[0]) == (1.0, 1.0, True)
    group.before_anchor = before
    assert group.policy_samples is before


def test_minibatches_gather_each_group_and_balance_the_group_count():
    """Members of one group are gathered even when apart; groups are dealt in order of first appearance, as
    evenly as the count allows; asking for more mini-batches than groups gives one group each."""
    assert minibatches(torch.tensor([5, 9, 5, 9]), 2) == [[0, 2], [1, 3]]
    ids = torch.tensor([3, 3, 1, 1, 2, 2, 8, 8, 6, 6, 4, 4])
    assert minibatches(ids, 3) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert minibatches(torch.tensor([4, 4, 2]), 10) == [[0, 1], [2]]
    assert minibatches(torch.tensor([4, 4, 2]), 0) == [[0, 1, 2]]


def test_pad_rows_right_pads_with_zeros():
    """pad_rows stacks 1-D tensors into [n, width] float32, each row left-aligned and zero-padded on the right."""
    out = pad_rows([torch.tensor([1.0, 2.0]), torch.tensor([3.0]), torch.tensor([])], 3)
    assert out.dtype == torch.float32
    assert out.tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
