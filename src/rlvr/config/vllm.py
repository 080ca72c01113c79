"""The vLLM section: how rollouts run on vLLM (colocated or on a server), and the sampler/trainer correction.

TRL's ``GRPOConfig`` names and defaults, except ``vllm_server_host`` (127.0.0.1, where TRL's 0.0.0.0
means the same on Linux) and ``vllm_importance_sampling_correction``, whose default ``null`` is "on
for rollout_engine=vllm, off for rlvr's own engines" (TRL's True only ever applies with vLLM).
``vllm_importance_sampling_cap`` (TRL's older name) is read as ``vllm_importance_sampling_clip_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import _f, _fail
from rlvr.core.names import IS_MODES

VLLM_MODES = ("colocate", "server")


@dataclass(frozen=True)
class VLLMConfig:
    vllm_mode: str = _f("colocate", "rollout_engine=vllm: colocate (vLLM in the training process, sharing its device) | "
                                    "server (generation on a separate `rlvr vllm-serve`, on other GPUs or another node; "
                                    "the weights are pushed to it after every update)")
    vllm_gpu_memory_utilization: float = _f(0.3, "colocate on CUDA: the fraction of GPU memory vLLM may take (weights + "
                                                 "KV cache); the trainer shares the GPU (server: `rlvr vllm-serve "
                                                 "--gpu-memory-utilization`)")
    vllm_max_model_length: int | None = _f(None, "vLLM's context window (prompt + response); null: the model's "
                                                 "max_position_embeddings, at most 8192")
    vllm_tensor_parallel_size: int = _f(1, "colocate: must be 1 (one vLLM per training process); server: must equal the "
                                           "server's `--tensor-parallel-size` (checked when the trainer connects)")
    vllm_enable_sleep_mode: bool = _f(False, "colocate on CUDA: vLLM's weights and KV cache are released after each "
                                             "rollout and restored for the next (sleep level 2), so the update has "
                                             "the GPU; not available on CPU")
    vllm_kv_cache_tokens: int = _f(32768, "colocate on CPU: the KV cache holds this many tokens (vLLM would otherwise "
                                          "reserve a share of all RAM); at least vllm_max_model_length")
    vllm_server_base_url: str | None = _f(None, "server: the `rlvr vllm-serve` URL, e.g. http://10.0.0.2:8000 "
                                                "(null: http://vllm_server_host:vllm_server_port)")
    vllm_server_host: str = _f("127.0.0.1", "server: host of `rlvr vllm-serve` (ignored with vllm_server_base_url)")
    vllm_server_port: int = _f(8000, "server: HTTP port of `rlvr vllm-serve` (ignored with vllm_server_base_url)")
    vllm_server_timeout: float = _f(240.0, "server: seconds to wait for the server to answer its health check at "
                                           "start-up; every later call times out after this long too")
    vllm_group_port: int = _f(51216, "server: TCP port of the weight-update process group (NCCL on GPUs, gloo on CPU) "
                                     "on the server's host")
    vllm_importance_sampling_correction: bool | None = _f(
        None, "weight each token's loss by the sampler/trainer importance ratio pi_old/pi_sampler "
              "(truncated or masked, vllm_importance_sampling_mode); null: on for rollout_engine=vllm, off for "
              "rlvr/hf (they sample exactly what the trainer computes)")
    vllm_importance_sampling_mode: str = _f("sequence_mask", "token_truncate | token_mask | sequence_truncate | "
                                                             "sequence_mask (TRL's default): per-token or per-sequence "
                                                             "ratio, clipped to or masked outside [clip_min, clip_max]")
    vllm_importance_sampling_clip_max: float | None = _f(3.0, "C_max of the importance ratio (TRL's older name: "
                                                              "vllm_importance_sampling_cap); null: no upper bound")
    vllm_importance_sampling_clip_min: float | None = _f(None, "C_min of the importance ratio; null: no lower bound")

    def __post_init__(self) -> None:
        if self.vllm_mode not in VLLM_MODES:
            _fail("vllm_mode", self.vllm_mode, f"choose one of {VLLM_MODES}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            _fail("vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization,
                  "use a fraction in (0, 1], such as 0.3 when the trainer shares the GPU")
        if self.vllm_max_model_length is not None and self.vllm_max_model_length < 2:
            _fail("vllm_max_model_length", self.vllm_max_model_length,
                  "use at least the longest prompt + max_completion_length, or null (the model's positions)")
        if self.vllm_tensor_parallel_size < 1:
            _fail("vllm_tensor_parallel_size", self.vllm_tensor_parallel_size, "use 1 or more GPUs")
        if self.vllm_mode == "colocate" and self.vllm_tensor_parallel_size != 1:
            _fail("vllm_tensor_parallel_size", self.vllm_tensor_parallel_size,
                  "a colocated vLLM runs on its training process's device; for tensor parallelism start "
                  "`rlvr vllm-serve --tensor-parallel-size K` on K other GPUs and set vllm_mode=server")
        if self.vllm_enable_sleep_mode and self.vllm_mode != "colocate":
            _fail("vllm_enable_sleep_mode", True, "sleep mode frees a colocated vLLM's memory for the update; a "
                  "server has its own GPUs: drop it, or use vllm_mode=colocate")
        if self.vllm_kv_cache_tokens < 1:
            _fail("vllm_kv_cache_tokens", self.vllm_kv_cache_tokens, "use a positive token count such as 32768")
        if self.vllm_server_base_url is not None and not self.vllm_server_base_url.startswith(("http://", "https://")):
            _fail("vllm_server_base_url", self.vllm_server_base_url, "use a URL such as http://10.0.0.2:8000")
        for name in ("vllm_server_port", "vllm_group_port"):
            if not 0 < getattr(self, name) < 65536:
                _fail(name, getattr(self, name), "use a TCP port in 1..65535")
        if self.vllm_server_port == self.vllm_group_port:
            _fail("vllm_group_port", self.vllm_group_port, "the weight-update group needs its own port: use another "
                  "than vllm_server_port")
        if not self.vllm_server_timeout > 0:
            _fail("vllm_server_timeout", self.vllm_server_timeout, "use a positive number of seconds such as 240")
        if self.vllm_importance_sampling_mode not in IS_MODES:
            _fail("vllm_importance_sampling_mode", self.vllm_importance_sampling_mode, f"choose one of {IS_MODES}")
        lo, hi = self.vllm_importance_sampling_clip_min, self.vllm_importance_sampling_clip_max
        if hi is not None and not hi > 0:
            _fail("vllm_importance_sampling_clip_max", hi, "use a ratio > 0 such as 3.0 (TRL's default), or null")
        if lo is not None and not lo >= 0:
            _fail("vllm_importance_sampling_clip_min", lo, "use a ratio >= 0 such as 0.5, or null")
        if lo is not None and hi is not None and lo >= hi:
            _fail("vllm_importance_sampling_clip_min", lo, f"must be below vllm_importance_sampling_clip_max={hi}")
