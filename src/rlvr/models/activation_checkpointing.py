"""Activation checkpointing of the decoder layers, in any module mode, with a read-only KV prefix.

transformers' own ``gradient_checkpointing_enable`` acts only in training mode and drops the KV
cache; rlvr scores in eval mode (no dropout: the on-policy ratio is exactly 1) and its shared-prefix
scoring feeds the responses through a cache holding the prompts. So each decoder layer's forward
is wrapped in ``torch.utils.checkpoint`` (non-reentrant) whenever gradients are on: the layer keeps
only its input, and the backward recomputes it. The recompute reads the cache again, which is safe
because the response pass uses a read-only prefix cache (``rlvr.train.batching``).

Under FSDP2 the wrap sits inside the module's hooks (the forward is replaced, not ``__call__``), so
the recompute runs with the layer's weights gathered by FSDP's pre-backward hook.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def decoder_layers(model) -> list[torch.nn.Module]:
    """The model's decoder layers (transformers marks them as ``GradientCheckpointingLayer``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def enable_activation_checkpointing(model) -> int:
    """Checkpoint every decoder layer of ``model`` (a causal LM, PEFT-wrapped or not); return how many."""
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"gradient_checkpointing=true: found no decoder layers in {type(model).__name__} "
                         "(transformers models mark them GradientCheckpointingLayer); set gradient_checkpointing=false")
    for layer in layers:
        original = layer.forward

        def forward(*args, _original=original, **kwargs):
            if torch.is_grad_enabled():
                return checkpoint(_original, *args, use_reentrant=False, **kwargs)
            return _original(*args, **kwargs)

        layer.forward = forward
    return len(layers)
