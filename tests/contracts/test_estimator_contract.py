"""The contract of every registered advantage estimator, generated from the registry (never a list of names):
each declares at registration a float64 reference and the invariants it claims (rlvr.core.advantages,
``register_advantage``), and is held here to them on seeded batches (tests/helpers/contracts.py): groups of one
to eight responses, ties, uniform groups, interleaved arbitrary group ids; the optional inputs it declares it
needs (DaGRPO's scores and σ's members) are filled in.

An estimator registered without a contract fails ``test_declares_a_contract``, saying what to declare.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, ESTIMATOR_CONTRACTS, AdvantageInputs, AdvantageSettings
from tests.helpers.contracts import ESTIMATOR_BATCHES, cases, contract_of, estimator_batch, settings_label

FAMILY = "advantage estimator"
CASES = cases(ADVANTAGE_ESTIMATORS, ESTIMATOR_CONTRACTS)
SHIFT = 3.0


def _settings(name: str, overrides: dict) -> AdvantageSettings:
    return AdvantageSettings(estimator=name, **overrides)


def _batches(name: str, dtype: torch.dtype = torch.float32):
    needs = contract_of(FAMILY, name).needs
    for seed, label in enumerate(ESTIMATOR_BATCHES):
        yield label, estimator_batch(label, needs, dtype=dtype, seed=seed)


def _permuted(inputs: AdvantageInputs, order: torch.Tensor) -> AdvantageInputs:
    return AdvantageInputs(*(None if v is None else v[order] for v in
                             (inputs.rewards, inputs.group_ids, inputs.scores, inputs.stats_mask)))


@pytest.mark.parametrize("name", list(ADVANTAGE_ESTIMATORS))
def test_declares_a_contract(name):
    contract_of(FAMILY, name)


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_shape_dtype_and_finite(name, overrides):
    fn, settings = ADVANTAGE_ESTIMATORS[name], _settings(name, overrides)
    for label, inputs in _batches(name):
        for rewards in (inputs.rewards, inputs.rewards.round().long()):  # integer rewards: floating advantages
            advantages = fn(replace(inputs, rewards=rewards), settings)
            assert advantages.shape == inputs.rewards.shape, f"{name} on batch {label!r}: shape {advantages.shape}"
            assert advantages.is_floating_point(), f"{name} on batch {label!r}: dtype {advantages.dtype}"
            assert torch.isfinite(advantages).all(), f"{name} on batch {label!r}: {advantages}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_matches_its_reference(name, overrides, dtype):
    fn, settings = ADVANTAGE_ESTIMATORS[name], _settings(name, overrides)
    reference = contract_of(FAMILY, name).reference
    for label, inputs in _batches(name, dtype):
        expected = reference(inputs, settings)  # float64, from the same (dtype-rounded) inputs
        assert expected.dtype == torch.float64, f"{name}'s reference must compute in float64"
        actual = fn(inputs, settings)
        torch.testing.assert_close(actual, expected.to(actual.dtype), msg=lambda m, label=label: (
            f"{name} ({settings_label(overrides)}) differs from its declared reference on batch {label!r}: {m}"))


def _groups(inputs: AdvantageInputs) -> list[torch.Tensor]:
    return [inputs.group_ids == gid for gid in torch.unique(inputs.group_ids)]


def _zero_mean_per_group(fn, inputs, settings, label):
    advantages = fn(inputs, settings)
    sums = torch.stack([advantages[rows].sum() for rows in _groups(inputs)])
    torch.testing.assert_close(sums, torch.zeros_like(sums), msg=f"group sums on batch {label!r}: {sums}")
    return True


def _shift_invariant(fn, inputs, settings, label):
    shifted = replace(inputs, rewards=inputs.rewards + SHIFT,
                      scores=None if inputs.scores is None else inputs.scores + SHIFT)
    torch.testing.assert_close(fn(shifted, settings), fn(inputs, settings),
                               msg=lambda m: f"rewards + {SHIFT} changed the advantages on batch {label!r}: {m}")
    return True


def _permutation_equivariant(fn, inputs, settings, label):
    order = torch.randperm(len(inputs.rewards), generator=torch.Generator().manual_seed(len(label)))
    torch.testing.assert_close(fn(_permuted(inputs, order), settings), fn(inputs, settings)[order],
                               msg=lambda m: f"permuting the responses of batch {label!r}: {m}")
    return True


def _uniform_group_zero(fn, inputs, settings, label):
    advantages, checked = fn(inputs, settings), False
    for rows in _groups(inputs):
        values = [inputs.rewards[rows]] + ([] if inputs.scores is None else [inputs.scores[rows]])
        if rows.sum() > 1 and all((v == v[0]).all() for v in values):
            assert (advantages[rows] == 0).all(), f"a uniform group of batch {label!r}: {advantages[rows]}"
            checked = True
    return checked


def _singleton_zero(fn, inputs, settings, label):
    advantages, checked = fn(inputs, settings), False
    for rows in _groups(inputs):
        if rows.sum() == 1:
            assert (advantages[rows] == 0).all(), f"a group of one of batch {label!r}: {advantages[rows]}"
            checked = True
    return checked


INVARIANT_CHECKS = {  # each returns whether the batch had something to check
    "zero_mean_per_group": _zero_mean_per_group,
    "shift_invariant": _shift_invariant,
    "permutation_equivariant": _permutation_equivariant,
    "uniform_group_zero": _uniform_group_zero,
    "singleton_zero": _singleton_zero,
}


def _invariant_cases() -> list:
    out = []
    for case in CASES:
        name, overrides = case.values
        contract = ESTIMATOR_CONTRACTS.get(name)
        for invariant in (contract.invariants if contract is not None else ("none declared",)):
            out.append(pytest.param(name, overrides, invariant, id=f"{case.id}-{invariant}"))
    return out


@pytest.mark.parametrize(("name", "overrides", "invariant"), _invariant_cases())
def test_declared_invariant_holds(name, overrides, invariant):
    contract_of(FAMILY, name)
    fn, settings = ADVANTAGE_ESTIMATORS[name], _settings(name, overrides)
    checked = [INVARIANT_CHECKS[invariant](fn, inputs, settings, label)
               for label, inputs in _batches(name, torch.float64)]
    assert any(checked), f"no batch exercised {invariant}"


def test_every_invariant_has_a_check():
    from rlvr.core.advantages import ESTIMATOR_INVARIANTS

    assert set(INVARIANT_CHECKS) == set(ESTIMATOR_INVARIANTS)


def test_an_estimator_without_a_contract_fails_saying_what_to_declare():
    with pytest.raises(pytest.fail.Exception) as failed:
        contract_of(FAMILY, "toy_without_contract")
    message = str(failed.value)
    assert "advantage estimator 'toy_without_contract' declares no contract" in message
    assert "reference=" in message and "invariants=" in message and "Add an advantage estimator" in message
