"""Refuse, before any work, a step whose batch cannot fit in this machine's memory.

Two lower bounds, each far below what a run really takes, so a refusal is certain and a run that
fits is never refused:

- **rollout** (host RAM): a process keeps each of its completions' tokens with its log-prob until the
  update, at least ``ROLLOUT_BYTES_PER_TOKEN`` bytes a token (an int64 id and a float64; Python's lists
  take 3-5 times that):

      completions per process × max_completion_length × ROLLOUT_BYTES_PER_TOKEN

  Checked by ``--dry-run`` and at start-up before the model loads (``num_generations=1000000000``
  was a MemoryError after a minute and 7 GB).
- **update** (the model's device, once it is loaded): the weights, the reference's copy, and for each
  trainable parameter its gradient and AdamW's two moments in the parameter's dtype (3 × its bytes);
  FSDP2 splits all of it across the processes.

Convention: the machine's memory is its total (RAM: ``os.sysconf``; CUDA: ``torch.cuda.mem_get_info``'s
total), not what is free now, so other processes never cause a refusal.
"""

from __future__ import annotations

import os

import torch

ROLLOUT_BYTES_PER_TOKEN = 16  # a completion token's id (int64) and log-prob (float64), at the least


def ram_bytes() -> int:
    """This machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_bytes(device: torch.device) -> int:
    """The total memory of ``device`` (a CUDA GPU's, else RAM)."""
    return torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else ram_bytes()


def check_rollout_memory(*, completions_per_process: int, max_completion_length: int,
                         available: int | None = None) -> None:
    """ValueError when a process's completions alone cannot fit in RAM (module docstring), naming the options."""
    available = ram_bytes() if available is None else available
    need = completions_per_process * max_completion_length * ROLLOUT_BYTES_PER_TOKEN
    if need > available:
        raise ValueError(
            f"a step's rollout cannot fit in this machine's memory: {completions_per_process} completions per process "
            f"(prompts_per_step x num_generations, x (num_rephrasings + 1) with TA-GRPO, shared by the processes) x "
            f"max_completion_length={max_completion_length} tokens x "
            f"{ROLLOUT_BYTES_PER_TOKEN} bytes is at least {_size(need)}, and the machine has {_size(available)}; "
            "lower num_generations or prompts_per_step (TRL: generation_batch_size), or max_completion_length")


def check_update_memory(policy: torch.nn.Module, reference, *, device: torch.device, shards: int = 1,
                        available: int | None = None) -> None:
    """ValueError when the weights, the reference and the optimiser's state for the trainable ones cannot fit."""
    available = device_bytes(device) if available is None else available
    weights = sum(p.numel() * p.element_size() for p in policy.parameters())
    trainable = sum(p.numel() * p.element_size() for p in policy.parameters() if p.requires_grad)
    copied = sum(p.numel() * p.element_size() for p in reference.parameters()) if isinstance(
        reference, torch.nn.Module) else 0
    need = (weights + copied + 3 * trainable) // shards
    if need > available:
        raise ValueError(
            f"the update cannot fit in {device.type} memory: weights {_size(weights)} + reference {_size(copied)} + "
            f"3 x {_size(trainable)} of trainable weights (gradients and AdamW's two moments)"
            f"{f' / {shards} processes' if shards > 1 else ''} is at least {_size(need)}, and the device has "
            f"{_size(available)}; use LoRA (lora_r=16), beta=0 (no reference), dtype=bfloat16, a smaller model, "
            "or parallelism=fsdp over more GPUs")


def _size(count: int) -> str:
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.1f} MiB"
