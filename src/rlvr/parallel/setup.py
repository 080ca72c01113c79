"""Joining the job and wrapping the policy for it, at set-up; gathering full state dicts for a checkpoint.

``init_distributed`` joins the process group torchrun describes; ``wrap_policy`` returns the module the
update runs through: the policy itself (one process), DDP of it, or the policy sharded by FSDP2.

FSDP2 for policies that do not fit one device: sharding, full-weight phases, full state dicts.

``parallelism=fsdp`` applies ``fully_shard`` to every decoder layer (the model's
``_no_split_modules``) and then to the root, so parameters, gradients and AdamW states are split
over the W ranks; each layer's weights are all-gathered for its forward and backward only.

Forward passes of a sharded model are collectives: every rank must run the same number. The
update guarantees that (zero-loss micro-batches fill in). Generation and no-grad scoring do not:
rows finish at different steps on different ranks. They run inside :func:`full_weights`, which
all-gathers every layer once and keeps it gathered (no communication per forward) until the phase
ends — the memory of one full copy of the weights during rollout, as verl's HF rollout does.

With ``bf16=true`` every unit gets FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16,
reduce_dtype=float32)``: the shards (the master weights), their gradients and AdamW's states stay
fp32, the all-gathered weights a forward computes with are bf16 (half the gather, and half the full
copy a rollout holds), and gradients are reduced in fp32. Autocast stays on over it, so the ops
autocast runs in fp32 (log-softmax, the loss) still do.

Checkpoints hold full (unsharded) weights and optimiser states, gathered to rank 0, so a run
saved with FSDP resumes with DDP, another world size, or one process.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from rlvr.parallel.runtime import DistContext

PARALLELISMS = ("ddp", "fsdp")


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
        return shard_policy(policy, ctx, device, compute_dtype=compute_dtype)
    raise ValueError(f"parallelism={parallelism!r}: choose one of {PARALLELISMS}")


def shard_policy(policy, ctx, device: torch.device, *, compute_dtype: str | None = None):
    """``fully_shard`` each decoder layer, then the root (in place); returns the policy.

    ``compute_dtype="bfloat16"`` (``bf16=true``): gather bf16 weights, reduce fp32 gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (ctx.world_size,))
    layer_names = set(getattr(policy, "_no_split_modules", None) or [])
    layers = [m for m in policy.modules() if type(m).__name__ in layer_names]
    if not layers:
        raise ValueError(f"parallelism=fsdp: cannot find the decoder layers of {type(policy).__name__} "
                         "(no _no_split_modules); use parallelism=ddp")
    options = {}
    if compute_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, compute_dtype), reduce_dtype=torch.float32)
    for layer in layers:
        fully_shard(layer, mesh=mesh, **options)
    fully_shard(policy, mesh=mesh, **options)
    return policy


def full_state_dicts(model, optimizer) -> tuple[dict, dict]:
    """Unsharded model and optimiser state dicts on the CPU (a collective; rank 0 writes them)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    if getattr(model.config, "tie_word_embeddings", False):  # saved once, as save_pretrained does
        for key in getattr(model, "_tied_weights_keys", None) or {}:
            model_state.pop(key, None)
    return model_state, get_optimizer_state_dict(model, optimizer, options=options)
