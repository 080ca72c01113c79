"""Token log-probs and entropy straight from the last hidden states, a chunk of tokens at a time.

The plain path computes logits = h·Wᵀ for every response token, an [n, T, V] tensor (Qwen's
V = 151,936 at 8 × 1024 tokens: 5 GB in fp32), keeps it for the backward and allocates as much
again there. Here the M = n·T hidden states are cut into chunks of ``chunk_tokens`` rows:

    forward : per chunk, s = h_c·Wᵀ / τ (fp32), log p = s[x] − logsumexp(s), H = lse − Σ p·s
    backward: per chunk, s again, ds = ((1[v = x] − p_v)·g − p_v·(s_v − E_p[s])·g_H) / τ,
              dh_c = ds·W, dW += dsᵀ·h_c   (g_H: the entropy's gradient, when a loss uses it)

so at most one [chunk_tokens, V] block of logits exists at a time, forward or backward; the
price is one more h·Wᵀ per chunk in the backward. Under bf16 autocast the backward recomputes the
logits under the same autocast, so it differentiates what the forward computed. Exact: the same arithmetic as the plain path
(fp32 log-softmax), only the order of the dW sum over chunks differs.

Convention: temperature divides the logits before the log-softmax, as in ``core.logprobs``.
"""

from __future__ import annotations

import torch

from rlvr.core.logprobs import softmax_entropy

DEFAULT_CHUNK_TOKENS = 1024  # [1024, 151936] fp32 = 0.6 GB per block at Qwen's vocabulary


def chunked_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax((h·Wᵀ + b) / τ)[token] and the entropy there, never materialising [M, V].

    Args:
        hidden: [..., H] last hidden states (after the final norm), with grad.
        weight: [V, H] the LM head's weight (with grad; tied embeddings welcome).
        tokens: [...] long, the token each position predicts.
        bias: [V] or None.
        chunk_tokens: positions per block of logits.
        with_entropy: compute the entropy (a softmax more per block); False: it is returned as zeros.

    Returns:
        (logprobs [...] fp32 with grad, entropy [...] fp32, differentiable when ``with_entropy``).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    shape = tokens.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # [M, H]
    logprobs, entropy = _ChunkedHead.apply(flat_hidden, weight, bias, tokens.reshape(-1), temperature, chunk_tokens,
                                           with_entropy)
    return logprobs.view(shape), entropy.view(shape)


def _scaled_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float):
    logits = torch.nn.functional.linear(h, weight, bias).float()  # [c, V], fp32 for the softmax
    return logits if temperature == 1.0 else logits / temperature


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, temperature, chunk, with_entropy):
        m = hidden.shape[0]
        logprobs = torch.empty(m, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros_like(logprobs)
        lse_all = torch.empty_like(logprobs)
        for start in range(0, m, chunk):
            stop = min(m, start + chunk)
            s = _scaled_logits(hidden[start:stop], weight, bias, temperature)  # [c, V]
            lse = torch.logsumexp(s, dim=-1)  # [c]
            logprobs[start:stop] = s.gather(-1, tokens[start:stop, None]).squeeze(-1) - lse
            if with_entropy:
                entropy[start:stop] = softmax_entropy(s, lse)
            lse_all[start:stop] = lse
        ctx.save_for_backward(hidden, weight, bias, tokens, lse_all, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        device = hidden.device.type  # the backward recomputes the logits as the forward did (bf16 autocast or not)
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        ctx.set_materialize_grads(False)  # an output no loss uses gets None: no entropy term in the backward
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad, grad_entropy):
        device, enabled, dtype = ctx.autocast
        with torch.autocast(device_type=device, dtype=dtype, enabled=enabled):
            return _ChunkedHead._backward(ctx, grad, grad_entropy)

    @staticmethod
    def _backward(ctx, grad, grad_entropy):
        hidden, weight, bias, tokens, lse_all, entropy = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        for start in range(0, hidden.shape[0], chunk):
            stop = min(hidden.shape[0], start + chunk)
            g = grad[start:stop].float() if grad is not None else lse_all.new_zeros(stop - start)  # [c]
            s = _scaled_logits(hidden[start:stop], weight, bias, temperature)  # [c, V]
            ds = torch.sub(s, lse_all[start:stop, None]).exp_()  # softmax
            if grad_entropy is not None:  # dH/ds_v = −p_v·(s_v − E_p[s]), E_p[s] = lse − H
                mean_s = lse_all[start:stop] - entropy[start:stop]  # [c]
                from_entropy = ds * (s - mean_s[:, None]) * -grad_entropy[start:stop, None].float()  # [c, V]
            ds.mul_(-g[:, None])
            ds.scatter_add_(-1, tokens[start:stop, None], g[:, None])  # (1[v = x] − p)·g
            if grad_entropy is not None:
                ds.add_(from_entropy)
            if temperature != 1.0:
                ds.div_(temperature)
            if need_h:
                grad_h[start:stop] = (ds.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w.addmm_(ds.t(), hidden[start:stop].float())
            if need_b:
                grad_b.add_(ds.sum(0))
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None, None


class Fp32Head(torch.nn.Linear):
    """An LM head whose logits are computed in float32: its weight (and bias) float32, the hidden states cast to
    float32, autocast off for the product (TRL's ``cast_lm_head_to_fp32``)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            return torch.nn.functional.linear(hidden.float(), self.weight.float(),
                                              None if self.bias is None else self.bias.float())


def cast_lm_head_to_fp32(model: torch.nn.Module) -> None:
    """Make ``model``'s LM head an :class:`Fp32Head` in place (its weight float32); with tied embeddings the
    input embedding's output keeps the model's dtype, as TRL's cast does. A head that is not a plain
    ``nn.Linear`` (a LoRA adapter on it) is refused, as TRL refuses it."""
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        raise ValueError(f"cast_lm_head_to_fp32=true needs a plain nn.Linear LM head, this model's is "
                         f"{type(head).__name__} (e.g. LoRA on lm_head): remove lm_head from lora_target_modules or "
                         "set cast_lm_head_to_fp32=false")
    original = head.weight.dtype
    head.float()  # (a tied embedding shares the parameter: it becomes float32 too)
    head.__class__ = Fp32Head
    config = getattr(model, "config", None)
    if original != torch.float32 and getattr(config, "tie_word_embeddings", False):
        model.get_input_embeddings().register_forward_hook(lambda module, args, output: output.to(original))
