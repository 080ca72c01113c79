"""Launch keys: transformers' ``use_cpu`` and accelerate's launch config (``accelerate launch --config_file``,
open-r1's ``recipes/accelerate_configs/*.yaml``) in an rlvr config.

rlvr launches its own processes: ``nproc=N`` runs the command under torchrun with N processes on this machine
(docs/scaling.md, section 2), so accelerate's keys mean:

- ``num_processes`` N (accelerate: processes over all machines; one machine here) is ``nproc=N``;
- ``mixed_precision`` bf16 / no is ``bf16`` true / false unless the config sets ``bf16`` (transformers'
  ``bf16`` wins over accelerate's, as in TRL); fp16 and fp8 are refused;
- ``distributed_type`` NO, MULTI_GPU, MULTI_CPU are DDP over ``nproc`` processes; FSDP is ``parallelism=fsdp``;
  DeepSpeed and the rest are refused;
- ``use_cpu: true`` (transformers' and accelerate's) is ``device=cpu``;
- the keys of :data:`ACCELERATE` describe one machine's launch (``num_machines: 1``, ``machine_rank: 0``, ...):
  accepted there, refused for several machines (torchrun's ``--nnodes``, docs/scaling.md section 3).
Plain Python, no torch.
"""

from __future__ import annotations

from typing import Any

from rlvr.config.training_arguments import any_value

LAUNCH_TRANSLATED = ("use_cpu", "num_processes", "mixed_precision", "distributed_type")

_MULTI_NODE = "rlvr launches one machine's processes (nproc); several machines: torchrun --nnodes (docs/scaling.md, section 3)"
_ONE_MACHINE = "accelerate's launcher setting; rlvr launches with torchrun (nproc)"

# accelerate config keys -> (does this value describe a launch rlvr does?, why)
ACCELERATE: dict[str, tuple[Any, str]] = {
    "num_machines": (lambda v: v in (None, 1), _MULTI_NODE),
    "machine_rank": (lambda v: v in (None, 0), _MULTI_NODE),
    "main_process_ip": (lambda v: v is None, _MULTI_NODE),
    "main_process_port": (lambda v: v is None, _MULTI_NODE),
    "rdzv_backend": (any_value, _ONE_MACHINE),
    "same_network": (any_value, _ONE_MACHINE),
    "main_training_function": (any_value, _ONE_MACHINE),
    "compute_environment": (lambda v: v in (None, "LOCAL_MACHINE"), "rlvr runs on this machine (no SageMaker)"),
    "gpu_ids": (lambda v: v in (None, "all"), "choose the GPUs with CUDA_VISIBLE_DEVICES"),
    "downcast_bf16": (lambda v: v in (None, False, "no"), "TPU only"),
    "tpu_env": (lambda v: not v, "TPU only"), "tpu_use_cluster": (lambda v: not v, "TPU only"),
    "tpu_use_sudo": (lambda v: not v, "TPU only"),
    "enable_cpu_affinity": (any_value, _ONE_MACHINE),
    "deepspeed_config": (lambda v: not v, "rlvr has no DeepSpeed: parallelism=fsdp shards the model (docs/scaling.md)"),
}
ACCELERATE_BOOL_KEYS = frozenset({"same_network", "tpu_use_cluster", "tpu_use_sudo", "enable_cpu_affinity", "use_cpu"})

_DDP_TYPES = ("NO", "MULTI_GPU", "MULTI_CPU")


def translate_launch_keys(trl: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """Fill ``out`` with what the launch keys of ``trl`` mean; return the values refused (one line each)."""
    problems = []
    if "use_cpu" in trl and truthy(trl["use_cpu"]):
        if str(overrides.get("device", "cpu")).startswith("cuda"):
            problems.append(f"use_cpu: true contradicts device={overrides['device']}; remove one")
        out.setdefault("device", "cpu")
    if trl.get("num_processes") is not None:
        n = trl["num_processes"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            problems.append(f"num_processes: {n!r}: give a positive number of processes (rlvr's nproc)")
        elif overrides.get("nproc") not in (None, n):
            problems.append(f"num_processes: {n} contradicts nproc={overrides['nproc']}; remove one")
        else:
            out["nproc"] = n  # rlvr launches them under torchrun (docs/scaling.md, section 2)
    problems += _mixed_precision(trl.get("mixed_precision"), overrides, out)
    kind = trl.get("distributed_type")
    if kind is not None:
        kind = str(kind).upper().removeprefix("DISTRIBUTEDTYPE.")
        if kind == "FSDP":
            if overrides.get("parallelism") not in (None, "fsdp"):
                problems.append(f"distributed_type: FSDP contradicts parallelism={overrides['parallelism']}; remove one")
            out.setdefault("parallelism", "fsdp")
        elif kind not in _DDP_TYPES:
            problems.append(f"distributed_type: {kind}: rlvr runs DDP or FSDP2 over nproc processes (nearest: "
                            "parallelism=ddp|fsdp)")
    return problems


def _mixed_precision(value: Any, overrides: dict[str, Any], out: dict[str, Any]) -> list[str]:
    if value is None:
        return []
    mode = str(value).lower()
    if mode not in ("no", "bf16"):
        return [f"mixed_precision: {value!r}: rlvr trains in float32 or bf16 mixed precision (nearest: bf16: true)"]
    if "bf16" not in overrides:  # transformers' bf16 wins over accelerate's mixed_precision, as in TRL
        out["bf16"] = mode == "bf16"
    return []


def truthy(value: Any) -> bool:
    """A TRL boolean as YAML or the command line gives it (True, "true", "1", ...)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)
