"""bf16 mixed precision (``bf16=true``, TRL's name): bf16 compute, fp32 everything that accumulates.

The parameters, their gradients and AdamW's states stay fp32 (the master weights); the forwards of
the update, of the old/reference log-prob passes and of generation run under
``torch.autocast(bfloat16)``, so matrix products are bf16 while the log-softmax, the loss and its
reductions are fp32 (``rlvr.core.logprobs`` and ``rlvr.core.lm_head`` cast the logits up). Sampling
and training compute alike, so ``rollout/logprob_mismatch`` stays what it measures.

``dtype=bfloat16`` is the other choice: the weights themselves in bf16, half the memory of the
parameters, gradients and optimiser states, but an AdamW step at a small learning rate rounds away
in most weights (docs/scaling.md measures it).
"""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device | str, dtype: str | None):
    """``torch.autocast`` on ``device`` for ``dtype`` ("bfloat16"), or a no-op context for None."""
    if dtype is None:
        return contextlib.nullcontext()
    device_type = torch.device(device).type
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype))
