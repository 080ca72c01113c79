"""accelerate's launch keys and use_cpu: rlvr launches with torchrun (nproc) on one machine."""

import pytest

from rlvr.config import build_config
from rlvr.config.defaults_line import defaults_line

BASE = {"model_name_or_path": "tiny-random"}


def test_num_processes_is_nproc_and_the_start_up_line_says_torchrun_launches_them():
    cfg = build_config({**BASE, "num_processes": 4, "per_device_train_batch_size": 8})
    assert cfg.run.nproc == 4
    assert "num_processes=4 is nproc: rlvr launches the processes under torchrun" in defaults_line(cfg)
    with pytest.raises(ValueError, match="num_processes: 4 contradicts nproc=2"):
        build_config({**BASE, "num_processes": 4, "nproc": 2})


def test_use_cpu_is_the_cpu_device():
    assert build_config({**BASE, "use_cpu": True}).model.device == "cpu"
    assert build_config({**BASE, "use_cpu": False}).model.device == "auto"
    with pytest.raises(ValueError, match="use_cpu: true contradicts device=cuda"):
        build_config({**BASE, "use_cpu": True, "device": "cuda"})


def test_mixed_precision_is_bf16_unless_bf16_is_set():
    assert build_config({**BASE, "mixed_precision": "no"}).model.bf16 is False  # TRL's bf16 default is true
    assert build_config({"preset": "rlvr", "mixed_precision": "bf16"}).model.bf16 is True
    assert build_config({**BASE, "mixed_precision": "no", "bf16": True}).model.bf16 is True  # transformers' wins
    with pytest.raises(ValueError, match="mixed_precision: 'fp16': rlvr trains in float32 or bf16"):
        build_config({**BASE, "mixed_precision": "fp16"})


def test_distributed_type_is_ddp_or_fsdp_and_several_machines_are_refused():
    assert build_config({**BASE, "distributed_type": "MULTI_GPU"}).run.parallelism == "ddp"
    assert build_config({**BASE, "distributed_type": "FSDP"}).run.parallelism == "fsdp"
    with pytest.raises(ValueError, match="distributed_type: DEEPSPEED: rlvr runs DDP or FSDP2"):
        build_config({**BASE, "distributed_type": "DEEPSPEED"})
    cfg = build_config({**BASE, "num_machines": 1, "machine_rank": 0, "gpu_ids": "all", "same_network": True,
                        "compute_environment": "LOCAL_MACHINE", "rdzv_backend": "static", "downcast_bf16": "no"})
    assert cfg.run.nproc == 1
    with pytest.raises(ValueError) as error:
        build_config({**BASE, "num_machines": 2})
    assert str(error.value).splitlines()[1].strip().startswith("num_machines: 2 is not supported (rlvr launches one "
                                                               "machine's processes")
