"""A faster one-token decoding step for Llama-family models: stacked q/k/v, prepacked weights.

One decoding step of a transformers Llama/Qwen2/Mistral model runs seven matrix products per layer
on a [batch, hidden] input (q, k, v, o, gate, up, down) and the LM head. At decoding batch sizes
these are skinny products, far from what the machine's matmul reaches; they are most of the step.
This step changes only how the products run:

- q/k/v as one product against their weights stacked ([q; k; v]);
- on CPU in float32 every product runs on weights reordered once into oneDNN's blocked layout
  (:class:`Projection`): 1.3-2.5x faster than ``F.linear`` at these shapes in ad-hoc timings; the
  kept measurement is the engine's (docs/performance.md, "Rollout against the machine's ceiling"). gate/up are not stacked: on
  this machine one [576, 3072] product was slower than two [576, 1536] ones.

The attention reads the cache up to the filled length rounded up to a multiple of ``kv_bucket`` (the
rest masked out): 128 on CUDA, 1 elsewhere. On an H200 the first rollout took 0.126 s a position
against 0.027 s for the same shapes again (2026-12-04, docs/scaling.md); the likeliest cause is a
set-up per new attention shape (cuDNN's attention builds a graph per shape), which buckets make once
per 128 positions. That cause and the bucket's effect are not yet measured on a GPU.

Everything else is the model's own code (its RMSNorm and rotary-embedding modules, SDPA over the
same KV cache, its final norm). Prefill still runs the model's forward.

The stacked and packed weights are a copy (about the model's size once more), made from the
current weights when a :class:`FusedDecoder` is built (once per ``generate`` call, so an update
between calls is always seen) and dropped at the end of the call.

Used by :class:`~rlvr.rollout.decode_engine.DecodeEngine` (``fused_decoding``, on by default) when
:func:`supports` says the model is a plain (no PEFT adapters, not sharded) Llama-family causal LM;
otherwise the engine calls the model's forward. ``tests/rollout/test_fused_decoder.py`` pins this
step to that forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

# Decoder layers with the Llama layout (RMSNorm, rotary q/k, GQA attention, SiLU-gated MLP).
MODEL_TYPES = ("llama", "qwen2", "mistral")


def _parts(model):
    """(decoder body, lm_head) of a transformers *ForCausalLM, or None when it is not one we know."""
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if body is None or head is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        return None
    return body, head


def supports(model) -> bool:
    """True for a plain Llama/Qwen2/Mistral causal LM whose layers this step reproduces exactly."""
    config = getattr(model, "config", None)
    parts = _parts(model)
    if config is None or parts is None or getattr(config, "model_type", None) not in MODEL_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    body, head = parts
    linears = [head]
    for layer in body.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or hasattr(attn, "q_norm"):  # Qwen3-style q/k norms: not this layout
            return False
        linears += [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    # exactly nn.Linear (a PEFT LoRA layer or a quantised linear is a subclass or another module),
    # holding ordinary tensors (an FSDP2-sharded weight is a DTensor)
    return all(type(m) is torch.nn.Linear and type(m.weight.data) is torch.Tensor for m in linears)


def kv_bucket_for(device: torch.device) -> int:
    """The attention-length bucket of :class:`FusedDecoder` on ``device``: 128 on CUDA, else 1 (exact).

    On CUDA a process's first rollout was ~5x slower per position than later ones (H200, 2026-12-04); the
    likely cause, not yet confirmed, is set-up per new attention shape (cuDNN's attention builds a graph per
    shape), and one-position growth makes every decoding step of a first rollout a new shape. On CPU exact
    lengths keep runs bit-identical to the model's forward.
    """
    return 128 if torch.device(device).type == "cuda" else 1


def _stack(linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = torch.cat([m.weight.detach() for m in linears], dim=0)
    if all(m.bias is None for m in linears):
        return weight, None
    bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features)
                      for m in linears])
    return weight, bias


def can_prepack(weight: torch.Tensor) -> bool:
    """oneDNN prepacking applies: a CPU float32 weight, torch built with oneDNN, no autocast active
    (under autocast the products must run in the autocast dtype, which F.linear does)."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and not torch.is_autocast_enabled("cpu"))


class Projection:
    """x @ W^T + b for a decoding step, with W prepacked for oneDNN when :func:`can_prepack` allows.

    On CPU, oneDNN's product on a weight reordered once into its blocked layout is 1.3-2.5x
    faster than ``F.linear`` (MKL) at decoding shapes ([16-64, 576] x [576, 1536] and the
    [576, 49152] LM head; ad-hoc timings, 2026-12-01); the reorder is a copy of the weight.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, prepack: bool, batch_hint: int):
        self.weight, self.bias, self.packed = weight, bias, None
        if prepack and can_prepack(weight):
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, batch_hint)
            except (RuntimeError, AttributeError):  # an op this torch build lacks: plain products
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def _plain(linear, *, prepack: bool, batch_hint: int) -> Projection:
    bias = linear.bias.detach() if linear.bias is not None else None
    return Projection(linear.weight.detach(), bias, prepack=prepack, batch_hint=batch_hint)


class FusedDecoder:
    """One-token decoding steps of ``model`` with q/k/v stacked and, on CPU, prepacked weights.

    Args:
        model: a model :func:`supports` accepts.
        prepack: reorder the weights for oneDNN (CPU float32, see :class:`Projection`).
        batch_hint: the decoding batch the packed layout is chosen for (any batch works).
        kv_bucket: the attention sees the cache's keys up to the filled length rounded up to a multiple
            of this (the positions past the filled ones masked out), so the attention's shapes change
            once every ``kv_bucket`` positions instead of at every one. 1: the filled length exactly.
            On CUDA, shape-keyed kernel set-up (likely cuDNN's attention graphs) would otherwise be paid
            at every new length: see :func:`kv_bucket_for`.
    """

    def __init__(self, model, *, prepack: bool = True, batch_hint: int = 32, kv_bucket: int = 1):
        self.body, head = _parts(model)
        self.kv_bucket = kv_bucket
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = self.body.layers[0].self_attn.head_dim
        self.q_size = self.heads * self.head_dim
        self.kv_size = self.kv_heads * self.head_dim
        options = {"prepack": prepack, "batch_hint": batch_hint}
        self.layers = []
        for layer in self.body.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append({
                "qkv": Projection(*_stack([attn.q_proj, attn.k_proj, attn.v_proj]), **options),
                "o": _plain(attn.o_proj, **options), "gate": _plain(mlp.gate_proj, **options),
                "up": _plain(mlp.up_proj, **options), "down": _plain(mlp.down_proj, **options)})
        self.head = _plain(head, **options)

    @torch.no_grad()
    def step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
             cache) -> torch.Tensor:
        """Logits [b, V] of the next token after ``input_ids`` [b, 1]; the step's keys/values go into ``cache``.

        ``attention_mask`` [b, L] covers the cached tokens and this one (1 = attend); ``position_ids``
        [b, 1]; ``cache`` the transformers cache the prefill filled (one layer object per layer).
        """
        batch = input_ids.shape[0]
        hidden = self.body.embed_tokens(input_ids)  # [b, 1, H]
        cos, sin = self.body.rotary_emb(hidden, position_ids)
        length = attention_mask.shape[1]  # L: cached tokens and this one
        seen = min(-(-length // self.kv_bucket) * self.kv_bucket, cache.layers[0].capacity)  # L rounded up
        mask = F.pad(attention_mask.bool(), (0, seen - length), value=False)[:, None, None, :]  # [b, 1, 1, L']
        for i, (layer, proj) in enumerate(zip(self.body.layers, self.layers)):
            x = layer.input_layernorm(hidden)
            q, k, v = proj["qkv"](x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = q.view(batch, 1, self.heads, self.head_dim).transpose(1, 2)  # [b, h, 1, d]
            k = k.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            cache.layers[i].update(k, v)
            keys, values = cache.layers[i].first(seen)  # [b, kv, L', d]: the filled L and masked positions
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=layer.self_attn.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)  # [b, h, 1, d]
            hidden = hidden + proj["o"](out.transpose(1, 2).reshape(batch, 1, self.q_size))
            x = layer.post_attention_layernorm(hidden)
            hidden = hidden + proj["down"](F.silu(proj["gate"](x)) * proj["up"](x))
        return self.head(self.body.norm(hidden))[:, -1, :]
