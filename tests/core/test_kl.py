"""k3 KL estimator per token (rlvr.core.losses.kl_k3): hand values, sign, masking and clamping."""

from __future__ import annotations

import math

import torch

from rlvr.core.losses import LOG_RATIO_CLAMP, kl_k3

F64 = torch.float64


def _t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def test_k3_hand_values():
    # δ = ref − logp.  δ = ln 2: e^δ − δ − 1 = 2 − ln 2 − 1 = 0.3068528
    #                 δ = −ln 2: 0.5 + ln 2 − 1 = 0.1931472
    logprobs = _t([[-1.0, -1.0]])
    ref = _t([[-1.0 + math.log(2.0), -1.0 - math.log(2.0)]])
    kl = kl_k3(logprobs, ref, torch.ones(1, 2, dtype=torch.bool))
    torch.testing.assert_close(kl, _t([[2 - math.log(2.0) - 1, 0.5 + math.log(2.0) - 1]]))
    torch.testing.assert_close(kl, _t([[0.3068528, 0.1931472]]), rtol=1e-6, atol=1e-7)


def test_k3_gradient():
    # ∂/∂logp (e^{ref−logp} − (ref−logp) − 1) = 1 − e^δ: δ = ln 2 → −1, δ = −ln 2 → +0.5.
    logprobs = _t([[-1.0, -1.0]]).requires_grad_()
    ref = _t([[-1.0 + math.log(2.0), -1.0 - math.log(2.0)]])
    kl_k3(logprobs, ref, torch.ones(1, 2)).sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([[-1.0, 0.5]]))


def test_k3_zero_when_equal():
    gen = torch.Generator().manual_seed(0)
    logprobs = torch.log(torch.rand(3, 5, generator=gen, dtype=F64))
    kl = kl_k3(logprobs, logprobs.clone(), torch.ones(3, 5))
    assert torch.equal(kl, torch.zeros_like(kl))


def test_k3_non_negative():
    # e^δ ≥ 1 + δ for every δ, so k3 ≥ 0 (including large |δ| up to the clamp).
    gen = torch.Generator().manual_seed(1)
    logprobs = 10 * torch.randn(64, 32, generator=gen, dtype=F64)
    ref = 10 * torch.randn(64, 32, generator=gen, dtype=F64)
    kl = kl_k3(logprobs, ref, torch.ones(64, 32))
    assert (kl >= 0).all()
    assert (kl > 0).any()


def test_k3_masked_positions_are_zero_with_garbage():
    mask = torch.tensor([[True, True, False, False, False]])
    logprobs = _t([[-1.0, -2.0, math.inf, -1e30, math.nan]]).requires_grad_()
    ref = _t([[-1.0, -2.0 + math.log(2.0), -math.inf, 1e30, 0.0]])
    kl = kl_k3(logprobs, ref, mask)
    torch.testing.assert_close(kl, _t([[0.0, 2 - math.log(2.0) - 1, 0.0, 0.0, 0.0]]))
    kl.sum().backward()
    torch.testing.assert_close(logprobs.grad, _t([[0.0, -1.0, 0.0, 0.0, 0.0]]))


def test_k3_clamped_no_inf():
    # δ = 100 clamps to 20: e^20 − 20 − 1; δ = −100 clamps to −20: e^−20 + 20 − 1.
    logprobs = _t([[0.0, 0.0, 0.0]]).requires_grad_()
    ref = _t([[100.0, -100.0, 1000.0]])
    kl = kl_k3(logprobs, ref, torch.ones(1, 3))
    e20 = math.exp(20.0)
    torch.testing.assert_close(kl, _t([[e20 - 21.0, math.exp(-20.0) + 19.0, e20 - 21.0]]))
    kl.sum().backward()
    # Clamped positions pass no gradient (and certainly no inf).
    torch.testing.assert_close(logprobs.grad, _t([[0.0, 0.0, 0.0]]))


def test_k3_clamp_is_the_shared_constant():
    # δ is clamped to ±LOG_RATIO_CLAMP = 20, the log-ratio's clamp: δ = 10 is not clamped (e^10 − 10 − 1),
    # δ = 20.5 is (e^20 − 20 − 1)
    assert LOG_RATIO_CLAMP == 20.0
    kl = kl_k3(_t([[0.0, 0.0]]), _t([[10.0, 20.5]]), torch.ones(1, 2))
    torch.testing.assert_close(kl, _t([[math.exp(10.0) - 11.0, math.exp(20.0) - 21.0]]))
