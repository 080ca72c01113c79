"""Data parallelism on torch.distributed: ranks, group-aligned shards, reductions, the wrapped policy.

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
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

PARALLELISMS = ("ddp", "fsdp")


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


def init_distributed(timeout_s: int = 1800) -> DistContext:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK); alone without it.

    Backend: NCCL when CUDA is present, gloo otherwise. On CUDA, rank r uses ``cuda:LOCAL_RANK``.
    ``timeout_s`` bounds every collective (ranks wait while rank 0 evaluates or saves).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank)


def shutdown_distributed(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


def wrap_policy(policy, ctx: DistContext, parallelism: str, device: torch.device, *, compute_dtype: str | None = None):
    """The module the update runs forward/backward through: the policy itself, or DDP/FSDP2 of it.

    DDP keeps a full copy per rank and all-reduces gradients (averaged; the update scales its
    loss by W so the result is the sum). FSDP2 (``fully_shard`` per decoder layer, then the root)
    shards parameters, gradients and optimiser state; it changes the policy in place, and with
    ``compute_dtype`` (bf16=true) gathers bf16 weights and reduces fp32 gradients.
    """
    if not ctx.enabled:
        return policy
    if parallelism == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [device.index] if device.type == "cuda" else None
        # gradients live in DDP's buckets: no second gradient-sized buffer
        return DistributedDataParallel(policy, device_ids=device_ids, gradient_as_bucket_view=True)
    if parallelism == "fsdp":
        from rlvr.train.fsdp import shard_policy

        return shard_policy(policy, ctx, device, compute_dtype=compute_dtype)
    raise ValueError(f"parallelism={parallelism!r}: choose one of {PARALLELISMS}")


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
