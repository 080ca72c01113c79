"""The contract of every registered loss aggregation, generated from the registry (never a list of names): each
declares at registration a float64 reference and whether it is micro-batch additive (rlvr.core.losses,
``register_aggregation``), and is held here to them on seeded per-token losses (tests/helpers/contracts.py:
unequal lengths, an empty sequence, finite garbage at padding):

- a 0-d tensor carrying the per-token loss's gradient, equal to its reference, with this batch's denominators
  and with a larger step's global ones;
- micro-batch additivity, when declared: the micro-batches' results, each given the step's global
  ``Denominators``, sum to the whole batch's (else, they equal the reference's on each micro-batch).

An aggregation registered without a contract fails ``test_declares_a_contract``, saying what to declare.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.core.losses import AGGREGATIONS, Denominators
from tests.helpers.contracts import aggregation_batch, contract_of

FAMILY = "aggregation"
NAMES = list(AGGREGATIONS)
SEEDS = (0, 1, 2)
MICRO_BATCHES = (slice(0, 2), slice(2, 3), slice(3, 6))  # unequal sizes


def _denominators(mask: torch.Tensor) -> dict[str, Denominators]:
    """This batch's own (None: the aggregation counts), its counts given, and a larger step's."""
    t = mask.shape[1]
    return {"own": Denominators(max_completion_length=t + 2),
            "given": Denominators(mask.sum(), mask.shape[0], t + 2),
            "larger step": Denominators(mask.sum() + 7, mask.shape[0] + 3, t + 2)}


@pytest.mark.parametrize("name", NAMES)
def test_declares_a_contract(name):
    contract_of(FAMILY, name)


@pytest.mark.parametrize("name", NAMES)
def test_matches_its_reference(name):
    reference = contract_of(FAMILY, name).reference
    for seed in SEEDS:
        per_token, mask = aggregation_batch(seed)
        for label, d in _denominators(mask).items():
            loss = per_token.clone().requires_grad_()
            out = AGGREGATIONS[name](loss, mask, d)
            assert out.dim() == 0 and out.requires_grad, f"{name}: a 0-d tensor with gradient, got {out}"
            expected = reference(per_token.to(torch.float64), mask.to(torch.float64), d)
            assert expected.dtype == torch.float64, f"{name}'s reference must compute in float64"
            torch.testing.assert_close(out, expected.float(), msg=lambda m, label=label, seed=seed: (
                f"{name} differs from its declared reference (seed {seed}, {label} denominators): {m}"))


@pytest.mark.parametrize("name", NAMES)
def test_micro_batches_sum_to_the_whole_batch(name):
    contract = contract_of(FAMILY, name)
    for seed in SEEDS:
        per_token, mask = aggregation_batch(seed)
        step = _denominators(mask)["given"]
        whole = AGGREGATIONS[name](per_token, mask, step)
        parts = [AGGREGATIONS[name](per_token[s], mask[s], step) for s in MICRO_BATCHES]
        if contract.micro_batch_additive:
            torch.testing.assert_close(sum(parts), whole, msg=lambda m, seed=seed: (
                f"{name}: the micro-batches' results with the step's Denominators do not sum to the whole batch's "
                f"(seed {seed}; declare micro_batch_additive=False if that is by design): {m}"))
        else:
            expected = [contract.reference(per_token[s].double(), mask[s].double(), step) for s in MICRO_BATCHES]
            torch.testing.assert_close(torch.stack(parts), torch.stack(expected).float())


def test_an_aggregation_without_a_contract_fails_saying_what_to_declare():
    with pytest.raises(pytest.fail.Exception) as failed:
        contract_of(FAMILY, "toy_without_contract")
    message = str(failed.value)
    assert "aggregation 'toy_without_contract' declares no contract" in message
    assert "reference=" in message and "Add a loss aggregation" in message
