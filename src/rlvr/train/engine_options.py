"""Which rollout engine a run builds, and with which keywords: the one place that reads the engine options.

``rollout_engine`` picks the kind (rlvr, hf, vllm); for vLLM ``vllm_mode`` picks the colocated engine
(rlvr.rollout.vllm_engine) or the client of a separate ``rlvr vllm-serve`` (rlvr.rollout.vllm_client).
"""

from __future__ import annotations

from rlvr.config import ExperimentConfig


def engine_spec(cfg: ExperimentConfig, *, is_main: bool) -> tuple[str, dict]:
    """(engine name for ``rlvr.rollout.build_engine``, its keywords). ``is_main``: this process is rank 0,
    the one that pushes weights to a vLLM server (every rank holds the same weights)."""
    r, v = cfg.rollout, cfg.vllm
    if r.rollout_engine == "rlvr":
        return "rlvr", {"max_batch_size": r.max_rollout_batch_size, "fused": r.fused_decoding}
    if r.rollout_engine != "vllm":
        return r.rollout_engine, {"max_batch_size": r.max_rollout_batch_size}
    if v.vllm_mode == "server":
        url = v.vllm_server_base_url or f"http://{v.vllm_server_host}:{v.vllm_server_port}"
        return "vllm-server", {"base_url": url.rstrip("/"), "timeout": v.vllm_server_timeout,
                               "group_port": v.vllm_group_port, "tensor_parallel_size": v.vllm_tensor_parallel_size,
                               "push_weights": is_main}
    return "vllm", {"max_model_len": v.vllm_max_model_length, "kv_cache_tokens": v.vllm_kv_cache_tokens,
                    "gpu_memory_utilization": v.vllm_gpu_memory_utilization,
                    "enable_sleep_mode": v.vllm_enable_sleep_mode}
