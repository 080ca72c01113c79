"""Group-relative advantages: the cross-check vectors of docs/design/conventions.md and group-by-id properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import build_config
from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    ESTIMATOR_CONTRACTS,
    AdvantageInputs,
    AdvantageSettings,
    advantage_estimator,
    dagrpo,
    group_statistics,
    grpo,
    register_advantage,
    rloo,
)
from rlvr.core.names import ADVANTAGE_ESTIMATOR_NAMES, SCALE_REWARDS

# Every registered estimator (read from the registry: one added later is held to the properties below too).
ESTIMATORS = list(ADVANTAGE_ESTIMATORS)
# the properties below that not every estimator has are asked only of those that claim them (their contract's
# invariants, rlvr.core.advantages.ESTIMATOR_CONTRACTS): a median baseline is not zero-mean, and it gives 0 to the
# responses equal to the median
ZERO_MEAN = [name for name in ESTIMATORS
             if "zero_mean_per_group" in getattr(ESTIMATOR_CONTRACTS.get(name), "invariants", ())]
# Rewards [1, 0, 0, 1] in one group: GRPO's ±√3/2·(1 − ~1e-6) (DaGRPO with τ = 0 is GRPO), RLOO's ±(2/3)/(σ + ε).
FOUR_REWARDS = {"grpo": 0.8660239, "dagrpo": 0.8660239, "rloo": 1.1546986}
F64 = torch.float64


def _adv(name, rewards, ids, **settings):
    """The registered estimator ``name`` on (rewards, group ids) with AdvantageSettings(**settings)."""
    return ADVANTAGE_ESTIMATORS[name](AdvantageInputs(rewards, ids), AdvantageSettings(estimator=name, **settings))


def grpo_adv(rewards, ids, **settings):
    return _adv("grpo", rewards, ids, **settings)


def rloo_adv(rewards, ids, **settings):
    return _adv("rloo", rewards, ids, **settings)


def _t(values, dtype=F64):
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
    adv = grpo_adv(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]))
    torch.testing.assert_close(adv, _t([0.8660239, -0.8660239, -0.8660239, 0.8660239]))


def test_grpo_cross_check_is_the_default_eps():
    # The default ε is verl's 1e-6, not TRL's 1e-4.
    rewards, ids = _t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0])
    assert torch.equal(grpo_adv(rewards, ids), grpo_adv(rewards, ids, eps=1e-6))


def test_grpo_cross_check_trl_eps_1e4():
    # A = ±0.5 / (0.5773503 + 1e-4) = ±0.8658754
    adv = grpo_adv(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), eps=1e-4)
    torch.testing.assert_close(adv, _t([0.8658754, -0.8658754, -0.8658754, 0.8658754]))


def test_grpo_cross_check_no_std_scaling():
    # Dr. GRPO: A = r − mean = ±0.5
    adv = grpo_adv(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), scale_rewards="none")
    torch.testing.assert_close(adv, _t([0.5, -0.5, -0.5, 0.5]))


def test_rloo_cross_check():
    # RLOO: A_0 = 1 − mean(0,0,1) = 2/3; A_1 = 0 − mean(1,0,1) = −2/3  (= G/(G−1)·(r − mean))
    adv = rloo_adv(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0]), scale_rewards="none")
    torch.testing.assert_close(adv, _t([0.6666667, -0.6666667, -0.6666667, 0.6666667]))


def test_rloo_preset_does_not_scale():
    # RLOO's default is no std scaling: one AdvantageSettings serves every estimator, so the default
    # lives in the config's algo=rloo preset, and the preset's settings give the cross-check values.
    algorithm = build_config({"model": "tiny-random", "algo": "rloo"}).algorithm
    assert (algorithm.advantage_estimator, algorithm.scale_rewards) == ("rloo", "none")
    rewards, ids = _t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0])
    adv = rloo_adv(rewards, ids, scale_rewards=algorithm.scale_rewards, eps=algorithm.advantage_eps)
    torch.testing.assert_close(adv, _t([0.6666667, -0.6666667, -0.6666667, 0.6666667]))


def test_grpo_cross_check_one_correct_of_eight():
    # [1,0,0,0,0,0,0,0]: mean 1/8, centred 7/8 and −1/8;
    # Σ(centred²) = 49/64 + 7·1/64 = 56/64 = 0.875, var = 0.875/7 = 0.125, std = 0.3535534
    # A = 0.875/0.3535544 = 2.474867, −0.125/0.3535544 = −0.353552
    adv = grpo_adv(_f32([1.0] + [0.0] * 7), _ids([0] * 8))
    torch.testing.assert_close(adv, _f32([2.474867] + [-0.353552] * 7))
    # The same in fp64 against the unrounded formula.
    adv64 = grpo_adv(_t([1.0] + [0.0] * 7), _ids([0] * 8))
    std = math.sqrt(0.875 / 7)
    torch.testing.assert_close(adv64, _t([0.875 / (std + 1e-6)] + [-0.125 / (std + 1e-6)] * 7))


# ---------------------------------------------------------------------------------------------
# Grouping by id, never by position (docs/design/pitfalls.md #9)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_interleaved_ids_equal_contiguous_grouping(estimator, scale):
    # Group 7 = rewards {1, 0}, group 3 = {0, 0.5}, interleaved vs laid out contiguously.
    interleaved = _adv(estimator, _t([1.0, 0.0, 0.0, 0.5]), _ids([7, 3, 7, 3]), scale_rewards=scale)
    contiguous = _adv(estimator, _t([1.0, 0.0, 0.0, 0.5]), _ids([7, 7, 3, 3]), scale_rewards=scale)
    # interleaved positions: 0→(g7, 1.0), 1→(g3, 0.0), 2→(g7, 0.0), 3→(g3, 0.5)
    # contiguous positions:  0→(g7, 1.0), 1→(g7, 0.0), 2→(g3, 0.0), 3→(g3, 0.5)
    torch.testing.assert_close(interleaved[[0, 2, 1, 3]], contiguous)


def test_interleaved_ids_hand_values():
    # Group 7 = {1, 0}: mean 0.5, std sqrt(0.5) = 0.7071068 → ±0.5/0.7071078 = ±0.7071058
    # Group 3 = {0, 0.5}: mean 0.25, std sqrt(0.125) = 0.3535534 → ∓0.25/0.3535544 = ∓0.7071048
    # Grouping by position (pairs [0,1], [2,3]) would give [+, −, −, +] instead.
    adv = grpo_adv(_f32([1.0, 0.0, 0.0, 0.5]), _ids([7, 3, 7, 3]))
    torch.testing.assert_close(adv, _f32([0.7071058, -0.7071048, -0.7071058, 0.7071048]))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_arbitrary_integer_ids(estimator):
    # Ids need not be dense or small: 10**9, negative, and a large 64-bit id.
    rewards = _t([1.0, 0.0, 0.0, 1.0, 0.0, 0.5])
    sparse = _adv(estimator, rewards, _ids([10**9, -5, 10**9, 2**62, -5, 2**62]), scale_rewards="group")
    dense = _adv(estimator, rewards, _ids([0, 1, 0, 2, 1, 2]), scale_rewards="group")
    assert torch.equal(sparse, dense)


@pytest.mark.parametrize("estimator", ZERO_MEAN)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_group_of_one_is_zero(estimator, scale):
    # Group 5 holds a single response: no baseline, advantage exactly 0.
    adv = _adv(estimator, _t([1.0, 0.0, 1.0, 0.7]), _ids([1, 1, 1, 5]), scale_rewards=scale)
    assert adv[3] == 0
    assert (adv[:3] != 0).all()


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_single_response_batch_is_zero(estimator, scale):
    adv = _adv(estimator, _t([0.3]), _ids([0]), scale_rewards=scale)
    assert torch.equal(adv, _t([0.0]))


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("scale", SCALE_REWARDS)
def test_uniform_group_is_exactly_zero(estimator, scale):
    # 0.1 is not representable: in fp64 (0.1+0.1+0.1)/3 = 0.10000000000000002 ≠ 0.1, so
    # r − mean is ~1e-17, not 0, and (r − mean)/(0 + ε) would be ~1e-11. It must be exactly 0.
    assert (0.1 + 0.1 + 0.1) / 3 != 0.1
    rewards = _t([0.1, 0.1, 0.1, 1.0, 0.0])
    adv = _adv(estimator, rewards, _ids([4, 4, 4, 9, 9]), scale_rewards=scale)
    assert (adv[:3] == 0).all()
    assert (adv[3:] != 0).all()


def test_batch_scaling_hand_computed():
    # Rewards [1, 0, 3, 1], groups {0: [1, 0], 1: [3, 1]}.
    # Group means 0.5 and 2 → centred [0.5, −0.5, 1, −1].
    # Batch std over all four: mean 1.25, Σ dev² = 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75,
    # std = sqrt(4.75/3) = 1.2583057. A = centred / (1.2583057 + 1e-6).
    batch_std = math.sqrt(4.75 / 3)
    expected = _t([0.5, -0.5, 1.0, -1.0]) / (batch_std + 1e-6)
    adv = grpo_adv(_t([1.0, 0.0, 3.0, 1.0]), _ids([0, 0, 1, 1]), scale_rewards="batch")
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(adv.float(), _f32([0.3973594, -0.3973594, 0.7947188, -0.7947188]))


def test_batch_scaling_differs_from_group_scaling():
    # Group std of {1, 0} is 0.7071, of {3, 1} is 1.4142: group scaling gives ±0.7071 in both.
    rewards, ids = _f32([1.0, 0.0, 3.0, 1.0]), _ids([0, 0, 1, 1])
    group = grpo_adv(rewards, ids, scale_rewards="group")
    torch.testing.assert_close(group, _f32([0.7071058, -0.7071058, 0.7071063, -0.7071063]))


def test_rloo_batch_and_group_scaling_hand_computed():
    # Group {1, 0, 0}: G/(G−1)·(r − mean) = 1.5·[2/3, −1/3, −1/3] = [1, −0.5, −0.5];
    # group std = sqrt((4/9 + 1/9 + 1/9)/2) = sqrt(1/3) = 0.5773503.
    # Batch = same three rewards, so batch std = group std here.
    rewards, ids = _t([1.0, 0.0, 0.0]), _ids([0, 0, 0])
    expected = _t([1.0, -0.5, -0.5]) / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(rloo_adv(rewards, ids, scale_rewards="group"), expected)
    torch.testing.assert_close(rloo_adv(rewards, ids, scale_rewards="batch"), expected)


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
@given(batch=_batches(), estimator=st.sampled_from(ZERO_MEAN), scale=st.sampled_from(SCALE_REWARDS))
def test_advantages_sum_to_zero_within_each_group(batch, estimator, scale):
    rewards, ids = batch
    adv = _adv(estimator, rewards, ids, scale_rewards=scale)
    assert torch.isfinite(adv).all()
    for gid in ids.unique():
        group_sum = adv[ids == gid].sum()
        # fp64: centring error ~1e-15·|r| amplified by at most 1/ε = 1e6.
        torch.testing.assert_close(group_sum, torch.zeros((), dtype=adv.dtype), rtol=0, atol=1e-7)


@settings(max_examples=100, deadline=None)
@given(
    batch=_batches(),
    estimator=st.sampled_from(ESTIMATORS),
    scale=st.sampled_from(SCALE_REWARDS),
    seed=st.integers(0, 2**31 - 1),
)
def test_permuting_the_batch_permutes_the_advantages(batch, estimator, scale, seed):
    rewards, ids = batch
    perm = torch.randperm(rewards.numel(), generator=torch.Generator().manual_seed(seed))
    adv = _adv(estimator, rewards, ids, scale_rewards=scale)
    adv_perm = _adv(estimator, rewards[perm], ids[perm], scale_rewards=scale)
    torch.testing.assert_close(adv_perm, adv[perm])


# ---------------------------------------------------------------------------------------------
# Errors, registry and dtypes
# ---------------------------------------------------------------------------------------------


def test_group_ids_must_be_1d():
    with pytest.raises(ValueError, match="1-D"):
        grpo_adv(_t([1.0, 0.0]), _ids([[0, 0]]))


def test_advantage_estimator_known_names():
    assert advantage_estimator("grpo") is grpo
    assert advantage_estimator("rloo") is rloo
    assert advantage_estimator("dagrpo") is dagrpo
    # <=: another test may register (and remove) a toy estimator of its own
    assert {"grpo", "rloo", "dagrpo"} <= set(ADVANTAGE_ESTIMATORS)
    assert set(ADVANTAGE_ESTIMATORS) == ADVANTAGE_ESTIMATOR_NAMES


def test_advantage_estimator_unknown_lists_valid_names():
    with pytest.raises(ValueError) as err:
        advantage_estimator("ppo")
    message = str(err.value)
    assert "'ppo'" in message
    for name in ADVANTAGE_ESTIMATORS:
        assert name in message


def test_register_advantage_adds_an_estimator_the_registry_and_the_config_accept():
    name = "toy_mean_baseline"
    assert name not in ADVANTAGE_ESTIMATORS and name not in ADVANTAGE_ESTIMATOR_NAMES
    with pytest.raises(ValueError, match="advantage_estimator"):
        build_config({"model": "tiny-random", "advantage_estimator": name})
    try:

        @register_advantage(name)
        def toy(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
            # r − group mean (Dr. GRPO without the zeroing of dead groups), from the shared group statistics
            return inputs.rewards - group_statistics(inputs.rewards, inputs.group_ids).mean.to(inputs.rewards.dtype)

        assert ADVANTAGE_ESTIMATORS[name] is toy and advantage_estimator(name) is toy
        assert name in ADVANTAGE_ESTIMATOR_NAMES
        assert build_config({"model": "tiny-random", "advantage_estimator": name}).algorithm.advantage_estimator == name
        adv = advantage_estimator(name)(AdvantageInputs(_t([1.0, 0.0, 0.0, 1.0]), _ids([0, 0, 0, 0])),
                                        AdvantageSettings(estimator=name))
        torch.testing.assert_close(adv, _t([0.5, -0.5, -0.5, 0.5]))  # = grpo with scale_rewards=none
    finally:
        ADVANTAGE_ESTIMATORS.pop(name, None)
        ADVANTAGE_ESTIMATOR_NAMES.discard(name)
    with pytest.raises(ValueError, match="advantage_estimator"):
        build_config({"model": "tiny-random", "advantage_estimator": name})


# ---------------------------------------------------------------------------------------------
# group_statistics
# ---------------------------------------------------------------------------------------------


def test_group_statistics_hand_values():
    # Group 7 = {1, 0, 0.5}: mean 0.5, std sqrt((0.25 + 0.25 + 0)/2) = 0.5; group 3 = {2, 2}: std 0, uniform;
    # group −1 = {4}: a group of one, std 0, uniform.
    stats = group_statistics(_t([1.0, 2.0, 0.0, 2.0, 0.5, 4.0]), _ids([7, 3, 7, 3, 7, -1]))
    torch.testing.assert_close(stats.mean, _t([0.5, 2.0, 0.5, 2.0, 0.5, 4.0]))
    torch.testing.assert_close(stats.std, _t([0.5, 0.0, 0.5, 0.0, 0.5, 0.0]))
    torch.testing.assert_close(stats.size, _t([3.0, 2.0, 3.0, 2.0, 3.0, 1.0]))
    assert stats.uniform.tolist() == [False, True, False, True, False, True]


def test_group_statistics_with_weights_is_over_the_weighted_members():
    # Weighted members: group 0 = {1, 0, 0, 0} (its 5 and 9 weigh 0), group 1 = {0.3, 0.9, 0.6}, group 2 = {2}.
    values = _t([1.0, 0.3, 5.0, 0.0, 0.9, 0.0, 9.0, 0.6, 0.0, 2.0, 7.0])
    ids = _ids([0, 1, 0, 0, 1, 0, 0, 1, 0, 2, 2])
    weights = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    stats = group_statistics(values, ids, weights)
    for gid in (0, 1, 2):
        members = values[(ids == gid) & weights]
        in_group = ids == gid
        assert torch.equal(stats.size[in_group], torch.full((int(in_group.sum()),), float(in_group.sum()), dtype=F64))
        torch.testing.assert_close(stats.mean[in_group], members.mean().expand(int(in_group.sum())))
        expected_std = members.std() if len(members) > 1 else torch.zeros((), dtype=F64)  # torch: unbiased
        torch.testing.assert_close(stats.std[in_group], expected_std.expand(int(in_group.sum())))
    torch.testing.assert_close(stats.std[0], _t(0.5))  # unbiased std of {1, 0, 0, 0} = sqrt(0.75/3)
    assert stats.size.tolist() == [6.0, 3.0, 6.0, 6.0, 3.0, 6.0, 6.0, 3.0, 6.0, 2.0, 2.0]
    # all-ones weights are no weights
    full = group_statistics(values, ids)
    ones = group_statistics(values, ids, torch.ones_like(values))
    for a, b in zip((full.mean, full.std, full.size, full.uniform), (ones.mean, ones.std, ones.size, ones.uniform),
                    strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_preserved(estimator, dtype):
    adv = _adv(estimator, _t([1.0, 0.0, 0.0, 1.0], dtype=dtype), _ids([0, 0, 0, 0]), scale_rewards="group")
    assert adv.dtype == dtype
    if estimator in FOUR_REWARDS:  # ±0.8660239 (GRPO) or ±(2/3)/(0.5773503 + 1e-6) = ±1.1546986 (RLOO), in dtype
        value = FOUR_REWARDS[estimator]
        torch.testing.assert_close(adv, _t([value, -value, -value, value], dtype=dtype))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_integer_rewards_are_not_truncated(estimator):
    # torch.tensor([1, 0, 0, 1]) is int64; casting the ±0.866 advantages back to int64 would
    # silently give all zeros.
    adv = _adv(estimator, torch.tensor([1, 0, 0, 1]), _ids([0, 0, 0, 0]), scale_rewards="group")
    assert adv.dtype == torch.get_default_dtype()
    if estimator in FOUR_REWARDS:
        value = FOUR_REWARDS[estimator]
        torch.testing.assert_close(adv, torch.tensor([value, -value, -value, value]))
