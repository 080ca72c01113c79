"""What the training step does through the job's processes and on the (wrapped) policy: this process's
place (:class:`DistContext`) and its collectives, gradient sync, the full weights of a sharded policy,
unwrapping, and bf16 autocast. Joining the job and wrapping the policy happen at set-up (``setup.py``).

Data parallelism on torch.distributed: ranks, group-aligned shards, reductions, the wrapped policy.

A step on W ranks (``torchrun --nproc-per-node W -m rlvr.cli train ...`` or ``rlvr train nproc=W``):

    every rank draws the same B prompts (same sampler state, same seed)
    rank r generates, rewards and scores the groups of prompts r·B/W .. (r+1)·B/W   (whole groups:
        a group or TA-GRPO pool lives on one rank; each rank has its own verifier pool)
    the groups are all-gathered: every rank then holds the step's groups in the 1-process order,
        so dynamic sampling, advantages (batch-level std included), DaGRPO masks and metrics are
        exactly the 1-process ones, with no further communication
    update: each mini-batch's pools are dealt to the ranks (whole pools); every rank divides its
        loss by the mini-batch's *global* token / sequence count (known to every rank, since every
        rank holds the whole batch), and DDP (or FSDP2) sums the gradients
    rank 0 writes the logs and checkpoints

Sampling is seeded per request from its position in the step's global request list (``row_seeds``),
so W ranks draw the tokens that one process would draw for the same rows.

bf16 mixed precision (``bf16=true``, TRL's name): bf16 compute, fp32 everything that accumulates.
The parameters, their gradients and AdamW's states stay fp32 (the master weights); the forwards of
the update, of the old/reference log-prob passes and of generation run under
``torch.autocast(bfloat16)`` (:func:`autocast`), so matrix products are bf16 while the log-softmax, the
loss and its reductions are fp32 (``rlvr.core.logprobs`` and ``rlvr.core.lm_head`` cast the logits up).
Sampling and training compute alike, so ``rollout/logprob_mismatch`` stays what it measures.
``dtype=bfloat16`` is the other choice: the weights themselves in bf16, half the memory of the
parameters, gradients and optimiser states, but an AdamW step at a small learning rate rounds away
in most weights (docs/scaling.md measures it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job. ``world_size == 1``: no process group, every method is local."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, count: int, rank: int | None = None) -> range:
        """The contiguous share ``rank`` (default: this one) gets of ``count`` items, balanced."""
        r = self.rank if rank is None else rank
        return range(count * r // self.world_size, count * (r + 1) // self.world_size)

    # ----------------------------------------------------------------- collectives (no-ops alone)
    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def gather_objects(self, obj) -> list:
        """Every rank's ``obj``, in rank order (picklable objects)."""
        if not self.enabled:
            return [obj]
        out: list = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def gather_values(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's 1-D ``values`` (their lengths may differ), concatenated in rank order, on ``values``' device:
        the lengths, then the values padded to the longest, in two tensor all-gathers on the collective device
        (``gather_objects`` would pickle them through the host)."""
        if not self.enabled:
            return values
        device = self.collective_device
        length = torch.tensor([values.numel()], dtype=torch.int64, device=device)
        lengths = [torch.empty_like(length) for _ in range(self.world_size)]
        dist.all_gather(lengths, length)
        counts = torch.cat(lengths).tolist()  # the one host read: the slice of each rank
        padded = torch.zeros(max(1, max(counts)), dtype=values.dtype, device=device)
        padded[: values.numel()] = values.to(device)
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded)
        return torch.cat([part[:count] for part, count in zip(parts, counts, strict=True)]).to(values.device)

    def broadcast_object(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum_floats(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64, so counts stay exact)."""
        return self._all_reduce(values, "SUM")

    def max_floats(self, values: Sequence[float]) -> list[float]:
        """Element-wise maximum over ranks."""
        return self._all_reduce(values, "MAX")

    def _all_reduce(self, values: Sequence[float], op: str) -> list[float]:
        if not self.enabled:
            return [float(v) for v in values]
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.collective_device)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
        return tensor.tolist()

    @property
    def collective_device(self) -> torch.device:
        """Where small tensors for collectives live: the GPU for NCCL, the CPU for gloo."""
        if self.enabled and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


ALONE = DistContext()  # a single process


def unwrap(model):
    """The policy inside a DDP wrapper (FSDP2 changes the module in place: itself)."""
    return getattr(model, "module", model)


@contextmanager
def gradient_sync(model, *, enabled: bool):
    """Synchronise gradients in the backward passes inside (DDP ``no_sync``, FSDP2 gradient sync).

    Micro-batches accumulate locally and the last one of an optimiser step synchronises the sum.
    A plain (single-process) module: nothing to do.
    """
    if hasattr(model, "no_sync"):  # DDP
        if enabled:
            yield
        else:
            with model.no_sync():
                yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(enabled)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextmanager
def full_weights(model):
    """Inside: every FSDP2 unit is gathered and stays so; forwards need no communication.

    A collective on entry and exit (all ranks enter together); nothing to do for other models.
    """
    if not is_sharded(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True)


def autocast(device: torch.device | str, dtype: str | None):
    """``torch.autocast`` on ``device`` for ``dtype`` ("bfloat16"), or a no-op context for None."""
    if dtype is None:
        return contextlib.nullcontext()
    device_type = torch.device(device).type
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype))
