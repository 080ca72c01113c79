"""The chunked LM head equals log_softmax(h·Wᵀ + b)[x] / entropy / gradients of the plain path."""

import pytest
import torch

from rlvr.core.lm_head import chunked_token_logprobs


def _plain(hidden, weight, bias, tokens, temperature):
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature  # [..., V]
    logp = torch.log_softmax(logits, -1)
    picked = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy.detach()


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_bias", [False, True])
def test_chunked_equals_plain_values_and_gradients(chunk, temperature, with_bias):
    gen = torch.Generator().manual_seed(0)
    n, t, h, v = 3, 5, 8, 50
    scales = {"hidden": 1.0, "weight": 0.3, "bias": 0.3}  # logits of a trained model's size (std ~1)
    leaves = {name: (scales[name] * torch.randn(*shape, generator=gen, dtype=torch.float64)).float().requires_grad_()
              for name, shape in {"hidden": (n, t, h), "weight": (v, h), "bias": (v,)}.items()}
    tokens = torch.randint(0, v, (n, t), generator=gen)
    upstream = torch.randn(n, t, generator=gen)  # a distinct weight per token, as a loss gives
    results = {}
    for name, fn in {"plain": _plain, "chunked": None}.items():
        for leaf in leaves.values():
            leaf.grad = None
        bias = leaves["bias"] if with_bias else None
        if fn is None:
            lp, ent = chunked_token_logprobs(leaves["hidden"], leaves["weight"], tokens, bias=bias,
                                             temperature=temperature, chunk_tokens=chunk)
        else:
            lp, ent = fn(leaves["hidden"], leaves["weight"], bias, tokens, temperature)
        (lp * upstream).sum().backward()
        results[name] = (lp.detach(), ent, {k: (x.grad.clone() if x.grad is not None else None)
                                            for k, x in leaves.items()})
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results["plain"], results["chunked"]
    torch.testing.assert_close(lp_b, lp_a, rtol=1e-6, atol=1e-6)
    # the entropy: lse − Σ p·s (rlvr's form) vs −Σ p·log p here, 1e-5 apart at worst
    torch.testing.assert_close(ent_b.detach(), ent_a, rtol=1e-5, atol=1e-5)
    assert lp_b.dtype == torch.float32
    for name in ("hidden", "weight") + (("bias",) if with_bias else ()):
        torch.testing.assert_close(g_b[name], g_a[name], rtol=1e-6, atol=1e-6, msg=name)
    assert with_bias or g_b["bias"] is None


@pytest.mark.parametrize("chunk", [2, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_entropy_gradient_equals_the_plain_paths(chunk, temperature):
    # A loss using both outputs (an entropy bonus): L = Σ g·log p + Σ g_H·H. The chunked backward's
    # −p·(s − E_p[s])·g_H term must give autograd's gradient of −Σ p·log p on the plain logits.
    gen = torch.Generator().manual_seed(1)
    n, h, v = 7, 8, 50
    hidden = torch.randn(n, h, generator=gen).requires_grad_()
    weight = (0.3 * torch.randn(v, h, generator=gen)).requires_grad_()
    tokens = torch.randint(0, v, (n,), generator=gen)
    g, g_entropy = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    grads = {}
    for name in ("plain", "chunked"):
        if name == "plain":
            logp = torch.log_softmax(torch.nn.functional.linear(hidden, weight) / temperature, -1)  # [n, V]
            lp, ent = logp.gather(-1, tokens[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)
        else:
            lp, ent = chunked_token_logprobs(hidden, weight, tokens, temperature=temperature, chunk_tokens=chunk)
        grads[name] = torch.autograd.grad((lp * g + ent * g_entropy).sum(), (hidden, weight))
    for a, b in zip(grads["plain"], grads["chunked"]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    # the entropy term is in it: the log-prob term alone gives another gradient
    lp, _ = chunked_token_logprobs(hidden, weight, tokens, temperature=temperature, chunk_tokens=chunk)
    (alone,) = torch.autograd.grad((lp * g).sum(), hidden)
    assert (alone - grads["chunked"][0]).abs().max() > 1e-3


def test_bad_arguments_are_refused():
    hidden, weight, tokens = torch.zeros(2, 4), torch.zeros(6, 4), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="temperature"):
        chunked_token_logprobs(hidden, weight, tokens, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_token_logprobs(hidden, weight, tokens, chunk_tokens=0)


def test_without_entropy_the_log_probs_are_the_same_and_the_entropy_is_not_computed():
    gen = torch.Generator().manual_seed(2)
    hidden, weight = torch.randn(6, 4, generator=gen), 0.3 * torch.randn(9, 4, generator=gen)
    tokens = torch.randint(0, 9, (6,), generator=gen)
    lp_a, ent_a = chunked_token_logprobs(hidden, weight, tokens, chunk_tokens=4)
    lp_b, ent_b = chunked_token_logprobs(hidden, weight, tokens, chunk_tokens=4, with_entropy=False)
    assert torch.equal(lp_a, lp_b) and (ent_a > 0).all() and not ent_b.any()


def test_the_chunked_head_s_entropy_under_bf16_autocast_is_fp32():
    # the head's product runs in bf16 under autocast (as the model's would); the entropy of those logits is fp32
    gen = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(6, 64, generator=gen), torch.randn(3000, 64, generator=gen)
    tokens = torch.randint(0, 3000, (6,), generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, entropy = chunked_token_logprobs(hidden, weight, tokens, chunk_tokens=4, with_entropy=True)
        logits = torch.nn.functional.linear(hidden, weight).double()  # the same bf16 logits, then fp64
    reference = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(entropy.double(), reference, rtol=0, atol=1e-5)
