"""The optimiser and its schedule, built from the ``optim`` options in one place.

``optim=adamw_torch_fused`` (TRL's default) runs AdamW as one fused kernel per parameter tensor, on CPU
and CUDA alike; ``adamw_torch`` is torch's multi-tensor (foreach) AdamW, whose intermediate lists are
the size of all the parameters at once — at 7B in fp32 that is a temporary 28 GB (3.5 GB per GPU
under 8-way FSDP) on top of the optimiser states. Both are element-wise, so the ranks of a sharded
update compute exactly what one process computes.
"""

from __future__ import annotations

import math

import torch
from transformers import get_scheduler

from rlvr.config.sections import OptimConfig


def build_optimizer(params, o: OptimConfig) -> torch.optim.AdamW:
    """AdamW over ``params`` with the run's learning rate, betas, epsilon, weight decay and implementation."""
    fused = o.optim == "adamw_torch_fused"
    return torch.optim.AdamW(params, lr=o.learning_rate, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_epsilon,
                             weight_decay=o.weight_decay, fused=fused, foreach=False if fused else None)


def warmup_steps(o: OptimConfig, total_steps: int) -> int:
    """Optimiser steps of warmup, as transformers 5 counts them: ``warmup_steps`` (a fraction of the run
    below 1, else a count), or ``warmup_ratio`` of the run; a fraction rounds up (``math.ceil``)."""
    fraction = o.warmup_steps if 0 < o.warmup_steps < 1 else o.warmup_ratio
    return int(o.warmup_steps) if o.warmup_steps >= 1 else math.ceil(fraction * total_steps)


def build_scheduler(optimizer: torch.optim.Optimizer, o: OptimConfig, total_steps: int):
    """The learning-rate schedule over ``total_steps`` optimiser steps (a transformers scheduler, with its
    ``lr_scheduler_kwargs``, e.g. ``min_lr_rate`` for cosine_with_min_lr)."""
    try:
        return get_scheduler(o.lr_scheduler_type, optimizer, num_warmup_steps=warmup_steps(o, total_steps),
                             num_training_steps=total_steps, scheduler_specific_kwargs=dict(o.lr_scheduler_kwargs or {}))
    except (TypeError, ValueError) as error:
        raise ValueError(f"lr_scheduler_type={o.lr_scheduler_type} with lr_scheduler_kwargs={o.lr_scheduler_kwargs}: "
                         f"{' '.join(str(error).split())}; see transformers' get_scheduler for the arguments each "
                         "schedule takes (cosine_with_min_lr needs min_lr or min_lr_rate)") from None
