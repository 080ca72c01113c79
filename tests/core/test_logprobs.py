"""Token log-probs and entropy from logits, with the sampling temperature."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.core.logprobs import entropy_from_logits, token_logprobs


def _logits_and_tokens(dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(2, 5, 11, generator=gen).to(dtype)  # [N, T, V]
    tokens = torch.randint(0, 11, (2, 5), generator=gen)  # [N, T]
    return logits, tokens


@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
def test_token_logprobs_equals_log_softmax_gathered(temperature):
    logits, tokens = _logits_and_tokens()
    reference = torch.log_softmax(logits / temperature, -1).gather(-1, tokens.unsqueeze(-1))
    out = token_logprobs(logits, tokens, temperature=temperature)
    assert out.shape == tokens.shape and out.dtype == torch.float32
    torch.testing.assert_close(out, reference.squeeze(-1))


def test_token_logprobs_temperature_hand_values():
    # logits [0, ln 3]: T = 1 → p = [1/4, 3/4];  T = 0.5 → logits [0, 2 ln 3] → p = [1/10, 9/10].
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])  # [1, 2, 2]
    tokens = torch.tensor([[0, 1]])
    t1 = token_logprobs(logits, tokens)
    t_half = token_logprobs(logits, tokens, temperature=0.5)
    torch.testing.assert_close(t1, torch.log(torch.tensor([[0.25, 0.75]])))
    torch.testing.assert_close(t_half, torch.log(torch.tensor([[0.1, 0.9]])))


def test_token_logprobs_low_precision_logits_computed_in_fp32():
    logits, tokens = _logits_and_tokens(torch.bfloat16)
    out = token_logprobs(logits, tokens, temperature=0.7)
    assert out.dtype == torch.float32
    reference = torch.log_softmax(logits.float() / 0.7, -1).gather(-1, tokens.unsqueeze(-1))
    torch.testing.assert_close(out, reference.squeeze(-1))


def test_token_logprobs_gradient_matches_log_softmax():
    logits, tokens = _logits_and_tokens(torch.float64)
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    token_logprobs(a, tokens, temperature=0.7).sum().backward()
    torch.log_softmax(b / 0.7, -1).gather(-1, tokens.unsqueeze(-1)).sum().backward()
    # The gradient comes back in the logits dtype, computed in fp32.
    torch.testing.assert_close(a.grad.float(), b.grad.float())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_fused_backward_matches_autograd_with_weighted_positions(temperature):
    # Distinct weight per position, repeated tokens, fp32 logits (the in-place path at T = 1).
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11) * 4
    tokens = torch.tensor([[1, 1, 1, 0, 10], [2, 3, 2, 3, 2], [10, 9, 8, 7, 6]])
    weights = torch.randn(3, 5)
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    out, lse = token_logprobs(a, tokens, temperature=temperature, return_logsumexp=True)
    (out * weights).sum().backward()
    reference = torch.log_softmax(b / temperature, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    (reference * weights).sum().backward()
    torch.testing.assert_close(out, reference)
    torch.testing.assert_close(lse, torch.logsumexp(logits / temperature, -1))
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    assert not lse.requires_grad


@pytest.mark.parametrize("temperature", [1.0, 0.3, 5.0])
@pytest.mark.parametrize("vocab", [1, 2, 7, 50])
def test_entropy_of_uniform_logits_is_log_v(vocab, temperature):
    logits = torch.full((2, 3, vocab), 1.7)
    ent = entropy_from_logits(logits, temperature=temperature)
    torch.testing.assert_close(ent, torch.full((2, 3), math.log(vocab)))


def test_entropy_hand_value_and_temperature():
    # logits [0, ln 3]: p = [1/4, 3/4], H = −(¼ ln ¼ + ¾ ln ¾) = 0.5623351;
    # T = 0.5: p = [1/10, 9/10], H = −(0.1 ln 0.1 + 0.9 ln 0.9) = 0.3250830.
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    h_half = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[h1]]))
    torch.testing.assert_close(entropy_from_logits(logits, temperature=0.5), torch.tensor([[h_half]]))


def test_entropy_matches_reference():
    logits, _ = _logits_and_tokens()
    p = torch.softmax(logits / 0.7, -1)
    torch.testing.assert_close(
        entropy_from_logits(logits, temperature=0.7), -(p * torch.log(p)).sum(-1)
    )


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_raises(temperature):
    logits, tokens = _logits_and_tokens()
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, tokens, temperature=temperature)
    with pytest.raises(ValueError, match="temperature"):
        entropy_from_logits(logits, temperature=temperature)


def _entropy_fp64(logits: torch.Tensor) -> torch.Tensor:
    s = logits.double()
    return -(torch.softmax(s, -1) * torch.log_softmax(s, -1)).sum(-1)


def test_entropy_under_bf16_autocast_is_computed_in_fp32():
    # bf16=true runs the update under autocast, where torch.linalg.vecdot would run in bf16: the entropy came
    # out up to 0.19 nats off. Under autocast it is the fp32 value, within fp32's reach of fp64 on these logits
    # (a sum over 49k terms: 3e-5 here; TRL's own entropy_from_logits, 2.3e-5).
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 8, 49152, generator=gen) * 4  # SmolLM2's vocabulary, peaked and flat positions
    with torch.autocast("cpu", dtype=torch.bfloat16):
        entropy = entropy_from_logits(logits)
    assert entropy.dtype == torch.float32
    torch.testing.assert_close(entropy, entropy_from_logits(logits), rtol=0, atol=0)  # autocast changes nothing
    torch.testing.assert_close(entropy.double(), _entropy_fp64(logits), rtol=0, atol=5e-5)
