"""Group-relative advantages: the cross-check vectors of docs/design/conventions.md and group-by-id properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    SCALE_REWARDS,
    get_advantage_estimator,
    grpo_advantages,
    rloo_advantages,
)

ESTIMATORS = [grpo_advantages, rloo_advantages]


def _t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def _f32(values):
    # Constants rounded to 7 significant digits are compared in fp32 (default rtol 1.3e-6); fp64's
    # default rtol 1e-7 is below their rounding error.
    return torch.tensor(values, dtype=torch.float32)


def _ids(values):
    return torch.tensor(values, dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# Cross-check vectors (docs/design/conventions.md)
# ---------------------------------------------------------------------------------------------


def test_grpo_cross_check_eps_1e6():
    # [1,0,0,1]: mean 0.5, centred ±0.5, unbiased std = sqrt(4·0.25/3) = 0.5773503
    # A = ±0.5 / (0.5773503 + 1e-6) = ±0.8660239
    adv = grpo_advantages(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]))
    torch.testing.assert_close(adv, _t([0.8660239, -0.8660239, -0.8660239, 0.8660239]))


def test_grpo_cross_check_is_the_default_eps():
    # The default ε is verl's 1e-6, not TRL's 1e-4.
    rewards, ids = _t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0])
    assert torch.equal(grpo_advantages(rewards, ids), grpo_advantages(rewards, ids, eps=1e-6))


def test_grpo_cross_check_trl_eps_1e4():
    # A = ±0.5 / (0.5773503 + 1e-4) = ±0.8658754
    adv = grpo_advantages(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), eps=1e-4)
    torch.testing.assert_close(adv, _t([0.8658754, -0.8658754, -0.8658754, 0.8658754]))


def test_grpo_cross_check_no_std_scaling():
    # Dr. GRPO: A = r − mean = ±0.5
    adv = grpo_advantages(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), scale_rewards="none")
    torch.testing.assert_close(adv, _t([0.5, -0.5, -0.5, 0.5]))


def test_rloo_cross_check():
    # RLOO: A_0 = 1 − mean(0,0,1) = 2/3; A_1 = 0 − mean(1,0,1) = −2/3  (= G/(G−1)·(r − mean))
    adv = rloo_advantages(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), scale_rewards="none")
    torch.testing.assert_close(adv, _t([0.6666667, -0.6666667, -0.6666667, 0.6666667]))


def test_rloo_default_scale_is_none():
    rewards, ids = _t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0])
    assert torch.equal(rloo_advantages(rewards, ids), rloo_advantages(rewards, ids, scale_rewards="none"))


def test_grpo_cross_check_one_correct_of_eight():
    # [1,0,0,0,0,0,0,0]: mean 1/8, centred 7/8 and −1/8;
    # Σ(centred²) = 49/64 + 7·1/64 = 56/64 = 0.875, var = 0.875/7 = 0.125, std = 0.3535534
    # A = 0.875/0.3535544 = 2.474867, −0.125/0.3535544 = −0.353552
    adv = grpo_advantages(_f32([1.0] + [0.0] * 7), _ids([0] * 8))
    torch.testing.assert_close(adv, _f32([2.474867] + [-0.353552] * 7))
    # The same in fp64 against the unrounded formula.
    adv64 = grpo_advantages(_t([1.0] + [0.0] * 7), _ids([0] * 8))
    std = math.sqrt(0.875 / 7)
    torch.testing.assert_close(adv64, _t([0.875 / (std + 1e-6)] + [-0.125 / (std + 1e-6)] * 7))


# ---------------------------------------------------------------------------------------------
# Grouping by id, never by position (docs/design/pitfalls.md #9)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_interleaved_ids_equal_contiguous_grouping(fn, scale):
    # Group 7 = rewards {1, 0}, group 3 = {0, 0.5}, interleaved vs laid out contiguously.
    interleaved = fn(_t([1.0, 0.0, 0.0, 0.5]), _ids([7, 3, 7, 3]), scale_rewards=scale)
    contiguous = fn(_t([1.0, 0.0, 0.0, 0.5]), _ids([7, 7, 3, 3]), scale_rewards=scale)
    # interleaved positions: 0→(g7, 1.0), 1→(g3, 0.0), 2→(g7, 0.0), 3→(g3, 0.5)
    # contiguous positions:  0→(g7, 1.0), 1→(g7, 0.0), 2→(g3, 0.0), 3→(g3, 0.5)
    torch.testing.assert_close(interleaved[[0, 2, 1, 3]], contiguous)


def test_interleaved_ids_hand_values():
    # Group 7 = {1, 0}: mean 0.5, std sqrt(0.5) = 0.7071068 → ±0.5/0.7071078 = ±0.7071058
    # Group 3 = {0, 0.5}: mean 0.25, std sqrt(0.125) = 0.3535534 → ∓0.25/0.3535544 = ∓0.7071048
    # Grouping by position (pairs [0,1], [2,3]) would give [+, −, −, +] instead.
    adv = grpo_advantages(_f32([1.0, 0.0, 0.0, 0.5]), _ids([7, 3, 7, 3]))
    torch.testing.assert_close(adv, _f32([0.7071058, -0.7071048, -0.7071058, 0.7071048]))


@pytest.mark.parametrize("fn", ESTIMATORS)
def test_arbitrary_integer_ids(fn):
    # Ids need not be dense or small: 10**9, negative, and a large 64-bit id.
    rewards = _t([1.0, 0.0, 0.0, 1.0, 0.0, 0.5])
    sparse = fn(rewards, _ids([10**9, -5, 10**9, 2**62, -5, 2**62]), scale_rewards="group")
    dense = fn(rewards, _ids([0, 1, 0, 2, 1, 2]), scale_rewards="group")
    assert torch.equal(sparse, dense)


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_group_of_one_is_zero(fn, scale):
    # Group 5 holds a single response: no baseline, advantage exactly 0.
    adv = fn(_t([1.0, 0.0, 1.0, 0.7]), _ids([1, 1, 1, 5]), scale_rewards=scale)
    assert adv[3] == 0
    assert (adv[:3] != 0).all()


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_single_response_batch_is_zero(fn, scale):
    adv = fn(_t([0.3]), _ids([0]), scale_rewards=scale)
    assert torch.equal(adv, _t([0.0]))


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_uniform_group_is_exactly_zero(fn, scale):
    # 0.1 is not representable: in fp64 (0.1+0.1+0.1)/3 = 0.10000000000000002 ≠ 0.1, so
    # r − mean is ~1e-17, not 0, and (r − mean)/(0 + ε) would be ~1e-11. It must be exactly 0.
    assert (0.1 + 0.1 + 0.1) / 3 != 0.1
    rewards = _t([0.1, 0.1, 0.1, 1.0, 0.0])
    adv = fn(rewards, _ids([4, 4, 4, 9, 9]), scale_rewards=scale)
    assert (adv[:3] == 0).all()
    assert (adv[3:] != 0).all()


def test_batch_scaling_hand_computed():
    # Rewards [1, 0, 3, 1], groups {0: [1, 0], 1: [3, 1]}.
    # Group means 0.5 and 2 → centred [0.5, −0.5, 1, −1].
    # Batch std over all four: mean 1.25, Σ dev² = 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75,
    # std = sqrt(4.75/3) = 1.2583057. A = centred / (1.2583057 + 1e-6).
    batch_std = math.sqrt(4.75 / 3)
    expected = _t([0.5, -0.5, 1.0, -1.0]) / (batch_std + 1e-6)
    adv = grpo_advantages(_t([1.0, 0.0, 3.0, 1.0]), _ids([0, 0, 1, 1]), scale_rewards="batch")
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(adv.float(), _f32([0.3973594, -0.3973594, 0.7947188, -0.7947188]))


def test_batch_scaling_differs_from_group_scaling():
    # Group std of {1, 0} is 0.7071, of {3, 1} is 1.4142: group scaling gives ±0.7071 in both.
    rewards, ids = _f32([1.0, 0.0, 3.0, 1.0]), _ids([0, 0, 1, 1])
    group = grpo_advantages(rewards, ids, scale_rewards="group")
    torch.testing.assert_close(group, _f32([0.7071058, -0.7071058, 0.7071063, -0.7071063]))


def test_rloo_batch_and_group_scaling_hand_computed():
    # Group {1, 0, 0}: G/(G−1)·(r − mean) = 1.5·[2/3, −1/3, −1/3] = [1, −0.5, −0.5];
    # group std = sqrt((4/9 + 1/9 + 1/9)/2) = sqrt(1/3) = 0.5773503.
    # Batch = same three rewards, so batch std = group std here.
    rewards, ids = _t([1.0, 0.0, 0.0]), _ids([0, 0, 0])
    expected = _t([1.0, -0.5, -0.5]) / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(rloo_advantages(rewards, ids, scale_rewards="group"), expected)
    torch.testing.assert_close(rloo_advantages(rewards, ids, scale_rewards="batch"), expected)


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@st.composite
def _batches(draw):
    n = draw(st.integers(min_value=1, max_value=24))
    rewards = draw(
        st.lists(
            st.one_of(
                st.sampled_from([0.0, 1.0, 0.1, 0.5]),
                st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False),
            ),
            min_size=n,
            max_size=n,
        )
    )
    ids = draw(
        st.lists(st.sampled_from([-3, 0, 1, 2, 10**9, 2**40]), min_size=n, max_size=n)
    )
    return _t(rewards), _ids(ids)


@settings(max_examples=200, deadline=None)
@given(batch=_batches(), fn=st.sampled_from(ESTIMATORS), scale=st.sampled_from(SCALE_REWARDS))
def test_advantages_sum_to_zero_within_each_group(batch, fn, scale):
    rewards, ids = batch
    adv = fn(rewards, ids, scale_rewards=scale)
    assert torch.isfinite(adv).all()
    for gid in ids.unique():
        group_sum = adv[ids == gid].sum()
        # fp64: centring error ~1e-15·|r| amplified by at most 1/ε = 1e6.
        torch.testing.assert_close(group_sum, torch.zeros((), dtype=adv.dtype), rtol=0, atol=1e-7)


@settings(max_examples=100, deadline=None)
@given(
    batch=_batches(),
    fn=st.sampled_from(ESTIMATORS),
    scale=st.sampled_from(SCALE_REWARDS),
    seed=st.integers(0, 2**31 - 1),
)
def test_permuting_the_batch_permutes_the_advantages(batch, fn, scale, seed):
    rewards, ids = batch
    perm = torch.randperm(rewards.numel(), generator=torch.Generator().manual_seed(seed))
    adv = fn(rewards, ids, scale_rewards=scale)
    adv_perm = fn(rewards[perm], ids[perm], scale_rewards=scale)
    torch.testing.assert_close(adv_perm, adv[perm])


# ---------------------------------------------------------------------------------------------
# Errors, registry and dtypes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("bad", ["std", "Group", "", "batch_std"])
def test_invalid_scale_rewards_raises(fn, bad):
    with pytest.raises(ValueError, match="scale_rewards"):
        fn(_t([1.0, 0.0]), _ids([0, 0]), scale_rewards=bad)


def test_group_ids_must_be_1d():
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(_t([1.0, 0.0]), _ids([[0, 0]]))


def test_get_advantage_estimator_known_names():
    assert get_advantage_estimator("grpo") is grpo_advantages
    assert get_advantage_estimator("rloo") is rloo_advantages
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "rloo"}


def test_get_advantage_estimator_unknown_lists_valid_names():
    with pytest.raises(ValueError) as err:
        get_advantage_estimator("ppo")
    message = str(err.value)
    assert "'ppo'" in message
    for name in ADVANTAGE_ESTIMATORS:
        assert name in message


@pytest.mark.parametrize("fn", ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_preserved(fn, dtype):
    adv = fn(_t([1.0, 0.0, 0.0, 1.0], dtype=dtype), _ids([0, 0, 0, 0]), scale_rewards="group")
    assert adv.dtype == dtype
    # ±0.8660239 (GRPO) or ±(2/3)/(0.5773503 + 1e-6) = ±1.1546986 (RLOO), rounded to dtype.
    value = 0.8660239 if fn is grpo_advantages else 1.1546986
    torch.testing.assert_close(adv, _t([value, -value, -value, value], dtype=dtype))


@pytest.mark.parametrize("fn", ESTIMATORS)
def test_integer_rewards_are_not_truncated(fn):
    # torch.tensor([1, 0, 0, 1]) is int64; casting the ±0.866 advantages back to int64 would
    # silently give all zeros.
    adv = fn(torch.tensor([1, 0, 0, 1]), _ids([0, 0, 0, 0]), scale_rewards="group")
    assert adv.dtype == torch.get_default_dtype()
    value = 0.8660239 if fn is grpo_advantages else 1.1546986
    torch.testing.assert_close(adv, torch.tensor([value, -value, -value, value]))
