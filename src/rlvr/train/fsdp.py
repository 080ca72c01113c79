"""FSDP2 for policies that do not fit one device: sharding, full-weight phases, full state dicts.

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

from contextlib import contextmanager

import torch


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
