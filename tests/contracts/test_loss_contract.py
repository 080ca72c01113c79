"""The contract of every registered policy loss, generated from the registry (never a list of names): each
declares at registration a float64 per-token reference and its value at ratio 1 (rlvr.core.loss_registry,
``register_policy_loss``), and is held here, under each LossSettings it declares, on seeded batches
(tests/helpers/contracts.py: ratios wide enough to clip, one advantage 0, masks of unequal lengths with holes
and an empty row) to:

- (loss [N, T], clipped [N, T] bool), finite, zero and unclipped off the mask;
- its reference's value and clipped tokens, in float32 against float64 (default tolerances);
- its reference's gradient with respect to the current log-probs (autograd on the reference), and no gradient
  reaching the old log-probs or the advantages;
- at ratio 1 (logprobs == old_logprobs), on the tokens it does not clip: its declared on-policy value, and the
  plain policy gradient −A·∇log π_θ.

A loss that takes the sampler correction's weights itself (``weights_inside``) gets them when the settings turn
the correction on (``is_level``). A random loss (Clip-Cov) is called with torch's generator seeded, and so is
its reference. A loss registered without a contract fails ``test_declares_a_contract``, saying what to declare.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.core.loss_registry import LOSS_CONTRACTS, POLICY_LOSSES, WEIGHTS_INSIDE, LossSettings
from tests.helpers.contracts import LOSS_SEEDS, cases, contract_of, loss_batch, settings_label

FAMILY = "policy loss"
CASES = cases(POLICY_LOSSES, LOSS_CONTRACTS)
F64 = torch.float64


def _settings(name: str, overrides: dict) -> LossSettings:
    return LossSettings(policy_loss=name, **overrides)


def _weights(name: str, s: LossSettings, batch, dtype=torch.float32) -> dict:
    on = name in WEIGHTS_INSIDE and s.is_level is not None  # the correction is on: such a loss takes its weights
    return {"is_weights": batch.is_weights.to(dtype)} if on else {}


def _run(fn, name, s, batch, logprobs, old_logprobs, advantages, seed, dtype=torch.float32):
    torch.manual_seed(seed)  # a random loss and its reference draw the same numbers
    return fn(logprobs, old_logprobs.to(dtype), advantages.to(dtype), batch.mask, s, **_weights(name, s, batch, dtype))


def _both(name, overrides, seed):
    """(batch, settings, (loss, clipped, logprobs) of the loss in float32, the same of its reference in float64)."""
    batch, s = loss_batch(seed), _settings(name, overrides)
    lp32 = batch.logprobs.clone().requires_grad_()
    lp64 = batch.logprobs.to(F64).requires_grad_()
    ours = _run(POLICY_LOSSES[name], name, s, batch, lp32, batch.old_logprobs, batch.advantages, seed)
    ref = _run(contract_of(FAMILY, name).reference, name, s, batch, lp64, batch.old_logprobs, batch.advantages, seed,
               F64)
    return batch, s, (*ours, lp32), (*ref, lp64)


def _where(name, overrides, seed) -> str:
    return f"{name} ({settings_label(overrides)}), batch seed {seed}"


@pytest.mark.parametrize("name", list(POLICY_LOSSES))
def test_declares_a_contract(name):
    contract_of(FAMILY, name)


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_returns_masked_per_token_loss_and_clipped(name, overrides):
    contract_of(FAMILY, name)
    for seed in LOSS_SEEDS:
        batch, s = loss_batch(seed), _settings(name, overrides)
        where = _where(name, overrides, seed)
        loss, clipped = _run(POLICY_LOSSES[name], name, s, batch, batch.logprobs.clone().requires_grad_(),
                             batch.old_logprobs, batch.advantages, seed)
        assert loss.shape == batch.mask.shape, f"{where}: loss {loss.shape}"
        assert loss.dtype == torch.float32, f"{where}: loss {loss.dtype} from float32 log-probs"
        assert clipped.shape == batch.mask.shape and clipped.dtype == torch.bool, f"{where}: clipped {clipped.dtype}"
        assert torch.isfinite(loss).all(), f"{where}: {loss}"
        assert (loss[~batch.mask] == 0).all(), f"{where}: nonzero off the mask: {loss}"
        assert not clipped[~batch.mask].any(), f"{where}: clipped off the mask"


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_value_and_clipped_match_the_reference(name, overrides):
    for seed in LOSS_SEEDS:
        _, _, (loss, clipped, _), (expected, expected_clipped, _) = _both(name, overrides, seed)
        where = _where(name, overrides, seed)
        assert expected.dtype == F64, f"{name}'s reference must compute in float64"
        torch.testing.assert_close(loss, expected.float(), msg=lambda m, where=where: (
            f"{where}: the loss differs from its declared reference: {m}"))
        assert torch.equal(clipped, expected_clipped), (
            f"{where}: clipped tokens {clipped.nonzero().tolist()}, reference {expected_clipped.nonzero().tolist()}")


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_gradient_matches_the_reference(name, overrides):
    for seed in LOSS_SEEDS:
        _, _, (loss, _, lp32), (expected, _, lp64) = _both(name, overrides, seed)
        upstream = torch.rand(loss.shape, generator=torch.Generator().manual_seed(seed), dtype=F64)  # ∂L/∂ℓ
        (grad,) = torch.autograd.grad((loss * upstream.float()).sum(), lp32, allow_unused=True)
        (expected_grad,) = torch.autograd.grad((expected * upstream).sum(), lp64, allow_unused=True)
        grad = torch.zeros_like(lp32) if grad is None else grad
        expected_grad = torch.zeros_like(lp64) if expected_grad is None else expected_grad
        where = _where(name, overrides, seed)
        torch.testing.assert_close(grad, expected_grad.float(), msg=lambda m, where=where: (
            f"{where}: the gradient w.r.t. logprobs differs from its reference's: {m}"))


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_gradient_reaches_the_current_logprobs_only(name, overrides):
    contract_of(FAMILY, name)
    for seed in LOSS_SEEDS:
        batch, s = loss_batch(seed), _settings(name, overrides)
        logprobs = batch.logprobs.clone().requires_grad_()
        old = batch.old_logprobs.clone().requires_grad_()
        advantages = batch.advantages.clone().requires_grad_()
        loss, _ = _run(POLICY_LOSSES[name], name, s, batch, logprobs, old, advantages, seed)
        grads = torch.autograd.grad(loss.sum(), [old, advantages], allow_unused=True)
        for what, grad in zip(("old_logprobs", "advantages"), grads, strict=True):
            assert grad is None or not grad.any(), (
                f"{_where(name, overrides, seed)}: gradient reaches {what} (detach it: a constant of the update)")


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_on_policy_value_and_plain_policy_gradient(name, overrides):
    on_policy = contract_of(FAMILY, name).on_policy
    for seed in LOSS_SEEDS:
        batch, s = loss_batch(seed), _settings(name, overrides)
        logprobs = batch.logprobs.clone().requires_grad_()
        torch.manual_seed(seed)  # (no sampler weights: the claim is the loss's own, at ρ = 1)
        loss, clipped = POLICY_LOSSES[name](logprobs, logprobs.detach().clone(), batch.advantages, batch.mask, s)
        kept = batch.mask & ~clipped  # [N, T]
        where = _where(name, overrides, seed)
        assert kept.any(), f"{where}: every token clipped at ratio 1"
        expected = on_policy(logprobs.detach().to(F64), batch.advantages.to(F64), s)  # [N, T]
        torch.testing.assert_close(loss[kept], expected[kept].float(), msg=lambda m, where=where: (
            f"{where}: at ratio 1 the loss is not its declared on-policy value (on_policy=, default the plain "
            f"policy gradient's -A): {m}"))
        (grad,) = torch.autograd.grad(loss.sum(), logprobs)
        whole_rows = (batch.mask & ~clipped.any(-1, keepdim=True))  # (a sequence ratio spreads a token's gradient)
        plain = (-batch.advantages).unsqueeze(-1).expand_as(grad)  # −A·∇log π: ∂/∂log π_t of −A·ρ_t at ρ = 1
        torch.testing.assert_close(grad[whole_rows], plain[whole_rows], msg=lambda m, where=where: (
            f"{where}: at ratio 1 the gradient is not the plain policy gradient -A: {m}"))


def test_a_loss_without_a_contract_fails_saying_what_to_declare():
    with pytest.raises(pytest.fail.Exception) as failed:
        contract_of(FAMILY, "toy_without_contract")
    message = str(failed.value)
    assert "policy loss 'toy_without_contract' declares no contract" in message
    assert "reference=" in message and "on_policy=" in message and "Add a loss" in message
