"""The vLLM section and the rollout-mode options: defaults (TRL's), every bad value refused with the fix,
and which engine each combination builds (rlvr.train.setup)."""

import pytest

from rlvr.config import build_config
from rlvr.train.plan import engine_plan
from rlvr.train.setup import engine_spec


def test_defaults_are_trls():
    v = build_config({}).vllm
    assert (v.vllm_mode, v.vllm_gpu_memory_utilization, v.vllm_tensor_parallel_size, v.vllm_enable_sleep_mode) == (
        "colocate", 0.3, 1, False)
    assert (v.vllm_server_port, v.vllm_server_timeout, v.vllm_group_port) == (8000, 240.0, 51216)
    assert (v.vllm_importance_sampling_mode, v.vllm_importance_sampling_clip_max,
            v.vllm_importance_sampling_clip_min) == ("sequence_mask", 3.0, None)
    r = build_config({}).rollout
    assert (r.max_rollout_batch_size, r.async_generation) == (64, False)


@pytest.mark.parametrize(("options", "words"), [
    ({"vllm_mode": "remote"}, ["vllm_mode='remote'", "colocate", "server"]),
    ({"vllm_gpu_memory_utilization": 0}, ["vllm_gpu_memory_utilization", "(0, 1]"]),
    ({"vllm_gpu_memory_utilization": 1.5}, ["vllm_gpu_memory_utilization", "(0, 1]"]),
    ({"vllm_max_model_length": 1}, ["vllm_max_model_length", "longest prompt"]),
    ({"vllm_tensor_parallel_size": 0}, ["vllm_tensor_parallel_size", "1 or more"]),
    ({"vllm_tensor_parallel_size": 2}, ["vllm_tensor_parallel_size", "rlvr vllm-serve --tensor-parallel-size",
                                        "vllm_mode=server"]),
    ({"vllm_mode": "server", "vllm_enable_sleep_mode": True}, ["vllm_enable_sleep_mode", "vllm_mode=colocate"]),
    ({"vllm_kv_cache_tokens": 0}, ["vllm_kv_cache_tokens", "positive"]),
    ({"vllm_server_base_url": "10.0.0.2:8000"}, ["vllm_server_base_url", "http://"]),
    ({"vllm_server_port": 0}, ["vllm_server_port", "1..65535"]),
    ({"vllm_group_port": 70000}, ["vllm_group_port", "1..65535"]),
    ({"vllm_group_port": 8000}, ["vllm_group_port", "its own port"]),
    ({"vllm_server_timeout": 0}, ["vllm_server_timeout", "positive"]),
    ({"vllm_importance_sampling_mode": "token"}, ["vllm_importance_sampling_mode", "sequence_mask"]),
    ({"vllm_importance_sampling_clip_max": 0}, ["vllm_importance_sampling_clip_max", "> 0"]),
    ({"vllm_importance_sampling_clip_min": -1}, ["vllm_importance_sampling_clip_min", ">= 0"]),
    ({"vllm_importance_sampling_clip_min": 3, "vllm_importance_sampling_clip_max": 2},
     ["vllm_importance_sampling_clip_min", "below"]),
    ({"max_rollout_batch_size": 0}, ["max_rollout_batch_size", "positive"]),
    ({"async_generation": True, "rollout_engine": "vllm", "algo": "dapo"}, ["async_generation", "dynamic sampling"]),
    ({"async_generation": True, "rollout_engine": "vllm", "vllm_enable_sleep_mode": True},
     ["vllm_enable_sleep_mode", "async_generation"]),
])
def test_bad_values_name_the_option_and_the_fix(options, words):
    with pytest.raises(ValueError) as info:
        build_config(options)
    for word in words:
        assert word in str(info.value)


def test_async_generation_needs_an_engine_that_supports_it():
    """The plan reads the engine class's abilities (train/plan.py's engine_plan), at start-up and in --dry-run."""
    from rlvr.rollout import ROLLOUT_ENGINES, engine_class
    from rlvr.train.plan import compile_plan

    for engine in ROLLOUT_ENGINES:
        config = build_config({"async_generation": True, "rollout_engine": engine})
        if engine_class(engine).supports_async_generation:
            assert compile_plan(config).engine.ahead, engine
            continue
        with pytest.raises(ValueError, match=rf"async_generation=True.*rollout_engine={engine} samples from the "
                                             r"training model itself: set rollout_engine=vllm"):
            compile_plan(config)


def test_trls_older_cap_name_is_the_clip_max():
    assert build_config({"vllm_importance_sampling_cap": 2.0}).vllm.vllm_importance_sampling_clip_max == 2.0


def _spec(cfg, *, is_main):
    """The engine and its keywords as the trainer builds them: from the config and the plan's engine part."""
    return engine_spec(cfg, engine_plan(cfg), is_main=is_main)


def test_each_combination_builds_its_engine():
    assert _spec(build_config({}), is_main=True) == ("rlvr", {"max_batch_size": 64, "fused": True})
    assert _spec(build_config({"rollout_engine": "hf", "max_rollout_batch_size": 8}), is_main=True) == (
        "hf", {"max_batch_size": 8})
    name, kw = _spec(build_config({"rollout_engine": "vllm", "vllm_gpu_memory_utilization": 0.5,
                              "vllm_max_model_length": 2048, "vllm_enable_sleep_mode": True}), is_main=True)
    assert name == "vllm" and kw == {"max_model_len": 2048, "kv_cache_tokens": 32768, "gpu_memory_utilization": 0.5,
                                     "enable_sleep_mode": True, "dtype": None}
    # bf16=true: vLLM generates in the update's compute dtype, not in the fp32 master weights' dtype
    assert _spec(build_config({"rollout_engine": "vllm", "bf16": True}), is_main=True)[1]["dtype"] == "bfloat16"
    server = build_config({"rollout_engine": "vllm", "vllm_mode": "server", "vllm_server_host": "10.0.0.2",
                           "vllm_server_port": 8001, "vllm_tensor_parallel_size": 2})
    assert _spec(server, is_main=False) == ("vllm-server", {
        "base_url": "http://10.0.0.2:8001", "timeout": 240.0, "group_port": 51216, "tensor_parallel_size": 2,
        "push_weights": False})
    url = build_config({"rollout_engine": "vllm", "vllm_mode": "server", "vllm_server_base_url": "http://h:9/"})
    assert _spec(url, is_main=True)[1]["base_url"] == "http://h:9"


def test_vllm_runs_with_cuda_graphs_on_cuda_and_eager_elsewhere_unless_told():
    """As TRL's colocated engine and trl vllm-serve (enforce_eager False): the graphs stay valid across weight
    syncs, since vLLM's reload_weights copies into the tensors they read."""
    from rlvr.rollout.vllm_engine import graph_mode

    assert graph_mode("cuda", None) is False and graph_mode("cpu", None) is True
    assert graph_mode("cuda", True) is True and graph_mode("cpu", False) is False
