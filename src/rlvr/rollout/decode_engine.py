"""rlvr's rollout engine: a sampling loop on the transformers model's forward.

Same contract and same sampler as :class:`~rlvr.rollout.hf_engine.HFEngine` (transformers'
``generate``), less of the work:

- **shared prefill**: a prompt repeated G times (a GRPO group) is run through the model once; its
  keys/values are copied to the G rows;
- **preallocated KV cache** (:class:`PreallocatedLayer`, below): no per-step concatenation;
- **finished rows leave the batch**: when rows emit EOS the cache keeps only the live rows, so
  decoding cost follows the responses still running (sampling draws one uniform number per
  original row each step, so the samples do not depend on when rows leave);
- **sampling log-probs computed in the loop** from one [n, V] row of logits per step; the
  [n, T, V] logits ``generate(output_logits=True)`` keeps are never stored.

Sampling: x ~ softmax(warp(logits)) with transformers' own processors in ``generate``'s order
(``RepetitionPenaltyLogitsProcessor``, ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
``TopPLogitsWarper``, ``MinPLogitsWarper``: :mod:`rlvr.rollout.sampling`), drawn by inverse-CDF
sampling (one uniform number per row); the reported log-prob is log softmax(logits / T)[x] (the
warps not renormalised into it: the trainer's convention). The repetition penalty sees each row's
prompt without its left padding and the response so far, as ``generate`` does. ``row_seeds``
gives each row its own generator, so a row's sample does not depend on the rest of the batch (used
by ``rlvr eval``).

The KV cache. A KV cache that is allocated once per generation and can drop finished rows.

transformers' ``DynamicCache`` concatenates every new key/value onto the old ones, copying the
whole cache at every decoding step (measured: a quarter of a SmolLM2 decoding step at batch 32).
:class:`PreallocatedLayer` writes into a buffer sized for prompt + max_new_tokens and hands the
attention the filled prefix as a view; ``batch_select_indices`` (inherited API) keeps only the
given rows, so the decoding batch shrinks as responses finish.

Only full-attention layers are supported; :func:`make_cache` falls back to ``DynamicCache`` for
models with sliding-window or other layer kinds.
"""

from __future__ import annotations

import inspect

import torch
from transformers import (
    DynamicCache,
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.cache_utils import Cache, DynamicLayer
from transformers.models.llama.modeling_llama import LlamaModel

from rlvr.rollout import fused_decoder
from rlvr.rollout.base import LocalEngine, left_pad
from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling

# The forward keyword that takes a cache: `cache` in recent transformers, `past_key_values` before
# (older versions silently ignore an unknown `cache=`, which would score without the prompt).
CACHE_KWARG = "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"


class PreallocatedLayer(DynamicLayer):
    """One layer's keys/values in a [batch, heads, capacity, head_dim] buffer."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        batch, heads, _, dim_k = key_states.shape
        self._keys = key_states.new_zeros((batch, heads, self.capacity, dim_k))
        self._values = value_states.new_zeros((batch, heads, self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache full: {end} tokens > capacity {self.capacity}")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self.keys = self._keys[:, :, :end]
        self.values = self._values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def first(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the first ``length`` positions (filled or not: zeros past the filled ones)."""
        return self._keys[:, :, :length], self._values[:, :, :length]

    def get_max_length(self) -> int:  # transformers' cache-layer interface (abstract there; Bloom reads it)
        return self.capacity

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys = self._keys[indices]
            self._values = self._values[indices]
            self.keys = self._keys[:, :, : self.length]
            self.values = self._values[:, :, : self.length]

    def reset(self) -> None:
        self.length = 0
        super().reset()


def full_attention_only(config) -> bool:
    """True when every layer of the text model attends to the whole past (no sliding windows)."""
    text = config.get_text_config(decoder=True)
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    return getattr(text, "sliding_window", None) is None or not getattr(text, "use_sliding_window", True)


def make_cache(config, capacity: int) -> Cache:
    """A preallocated cache of ``capacity`` tokens when the model allows it, else a DynamicCache."""
    if full_attention_only(config):
        text = config.get_text_config(decoder=True)
        return Cache(layers=[PreallocatedLayer(capacity) for _ in range(text.num_hidden_layers)])
    return DynamicCache(config=config)


class DecodeEngine(LocalEngine):
    """Batched sampling with shared prefill, a preallocated cache and compaction of finished rows.

    Args:
        model, pad_token_id, eos_token_ids, max_batch_size: as :class:`~rlvr.rollout.base.LocalEngine`.
        compact_below: drop finished rows once the live fraction of the batch falls below this;
            1 (default) drops them as soon as any finishes (measured fastest: each drop copies the
            cache of the live rows, cheaper than decoding a dead row for the following steps),
            0 never drops them (each step decodes the whole batch, as ``generate`` does).
        fused: decode one-token steps with :mod:`rlvr.rollout.fused_decoder` (q/k/v as one product,
            on CPU float32 oneDNN-prepacked weights) when the model allows it (a plain
            Llama-family model); False always calls the model's forward.
        kv_bucket: the fused step's attention-length bucket (``FusedDecoder``'s ``kv_bucket``);
            None: :func:`~rlvr.rollout.fused_decoder.kv_bucket_for` the model's device (128 on CUDA,
            1 elsewhere).
    """

    supports_row_seeds = True  # generate(row_seeds=...): a request's draws do not depend on its batch

    def __init__(self, model, *, pad_token_id: int, eos_token_ids: list[int], max_batch_size: int = 64,
                 compact_below: float = 1.0, fused: bool = True, kv_bucket: int | None = None):
        super().__init__(model, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids,
                         max_batch_size=max_batch_size)
        self.compact_below = compact_below
        self.fused = fused
        self.kv_bucket = kv_bucket
        self._decoder_now: fused_decoder.FusedDecoder | None = None  # built once per generate() call

    def generate(self, prompts, **kwargs) -> list[Completion]:
        try:
            return super().generate(prompts, **kwargs)
        finally:  # the stacked/packed weights are a copy of this call's weights: never reused after it
            self._decoder_now = None

    def _decoder(self, cache, batch: int):
        """The fused one-token step over the current weights, or None for the model's forward."""
        if not (self.fused and all(isinstance(layer, PreallocatedLayer) for layer in getattr(cache, "layers", [None]))
                and fused_decoder.supports(self.model)):
            return None
        if self._decoder_now is None:
            bucket = self.kv_bucket or fused_decoder.kv_bucket_for(next(self.model.parameters()).device)
            self._decoder_now = fused_decoder.FusedDecoder(self.model, batch_hint=batch, kv_bucket=bucket)
        return self._decoder_now

    # ------------------------------------------------------------------ one batch
    def _generate_chunk(self, prompts, max_new_tokens, sampling: Sampling, row_seeds) -> list[Completion]:
        device = next(self.model.parameters()).device
        n = len(prompts)
        unique: dict[tuple[int, ...], int] = {}
        row_prompt = torch.tensor([unique.setdefault(tuple(p), len(unique)) for p in prompts], device=device)  # [n]
        prompt_ids, prompt_mask = (x.to(device) for x in left_pad(list(unique), self.pad_token_id))  # [U, P]
        width = prompt_ids.shape[1]

        # Prefill each distinct prompt once, then give every row its prompt's keys/values.
        cache = make_cache(self.model.config, width + max_new_tokens)
        out = self.model(input_ids=prompt_ids, attention_mask=prompt_mask,
                         position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
                         **{CACHE_KWARG: cache}, use_cache=True, logits_to_keep=1)
        cache.batch_select_indices(row_prompt)
        logits = out.logits[row_prompt, -1, :]  # [n, V]
        attention_mask = prompt_mask[row_prompt]  # [n, P + t]
        next_position = prompt_mask.sum(-1)[row_prompt]  # [n]
        decoder = self._decoder(cache, n)  # built per generate() call: always the current weights

        sampler = _Sampler(sampling, row_seeds, device, rows=n)
        if sampling.repetition_penalty != 1:
            sampler.start_history(prompt_ids[row_prompt], prompt_mask[row_prompt], max_new_tokens)
        tokens = torch.full((n, max_new_tokens), self.pad_token_id, dtype=torch.long)  # [n, T]
        logprobs = torch.zeros((n, max_new_tokens))  # [n, T]
        lengths = torch.zeros(n, dtype=torch.long)  # tokens produced per row
        done = torch.zeros(n, dtype=torch.bool)
        live = torch.arange(n)  # original row of each batch row
        eos = torch.tensor(self.eos_token_ids, device=device)
        for t in range(max_new_tokens):
            chosen, chosen_logp = sampler.draw(logits, live)  # [b], [b]
            sampler.record(chosen, live, t)
            fresh = ~done[live]  # rows of the batch still producing tokens
            rows = live[fresh]
            tokens[rows, t] = chosen[fresh].cpu()
            logprobs[rows, t] = chosen_logp[fresh].float().cpu()
            lengths[rows] = t + 1
            done[rows] |= torch.isin(chosen[fresh], eos).cpu()
            if t == max_new_tokens - 1 or bool(done.all()):
                break
            keep = ~done[live]  # [b]
            if int(keep.sum()) < self.compact_below * len(live):
                index = keep.nonzero().squeeze(-1).to(device)
                cache.batch_select_indices(index)
                live, chosen = live[keep], chosen[index]
                attention_mask, next_position = attention_mask[index], next_position[index]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(live), 1))], dim=1)
            if decoder is not None:
                logits = decoder.step(chosen[:, None], attention_mask, next_position[:, None], cache)
            else:
                logits = self.model(input_ids=chosen[:, None], attention_mask=attention_mask,
                                    position_ids=next_position[:, None], **{CACHE_KWARG: cache},
                                    use_cache=True).logits[:, -1, :]
            next_position = next_position + 1
        return [self._completion(tokens[r, : lengths[r]], logprobs[r, : lengths[r]], bool(done[r]), max_new_tokens)
                for r in range(n)]

    @staticmethod
    def _completion(ids: torch.Tensor, logprobs: torch.Tensor, ended: bool, max_new_tokens: int) -> Completion:
        return Completion(ids.tolist(), logprobs.tolist(), truncated=not ended and len(ids) >= max_new_tokens)


class _Sampler:
    """x ~ softmax(warp(logits)) (greedy when T = 0: argmax of the penalised logits), with its
    log softmax(logits / T)."""

    def __init__(self, sampling: Sampling, row_seeds: list[int] | None, device, rows: int):
        self.temperature = sampling.temperature
        self.penalty = (RepetitionPenaltyLogitsProcessor(float(sampling.repetition_penalty))
                        if sampling.repetition_penalty != 1 else None)
        warpers = []
        if self.temperature > 0:  # (T = 0: greedy) generate's order: temperature, top_k, top_p, min_p
            warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k > 0:
                warpers.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                warpers.append(TopPLogitsWarper(sampling.top_p))
            if sampling.min_p is not None:
                warpers.append(MinPLogitsWarper(sampling.min_p))
        self.warpers = LogitsProcessorList(warpers)
        self.generators = (None if row_seeds is None else
                           [torch.Generator(device=device).manual_seed(int(s)) for s in row_seeds])
        self.rows = rows
        self.history: torch.Tensor | None = None  # [n, P + T] every row's tokens (repetition penalty only)
        self.width = 0

    def start_history(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int) -> None:
        """The rows' prompts [n, P] (left-padded) as the tokens the repetition penalty sees.

        Padding and the positions not generated yet hold the row's first prompt token, a token the
        row already has: the penalty, applied once per distinct token, sees exactly the row's tokens.
        """
        pads = (prompt_mask == 0).sum(-1, keepdim=True).clamp(max=prompt_ids.shape[1] - 1)  # [n, 1]
        first = prompt_ids.gather(1, pads)  # [n, 1]
        self.width = prompt_ids.shape[1]
        self.history = torch.cat([torch.where(prompt_mask.bool(), prompt_ids, first),
                                  first.expand(-1, max_new_tokens)], dim=1)  # [n, P + T]

    def record(self, chosen: torch.Tensor, live: torch.Tensor, t: int) -> None:
        if self.history is not None:
            self.history[live.to(self.history.device), self.width + t] = chosen

    def draw(self, logits: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = logits.float()  # [b, V]
        scaled = logits / self.temperature if self.temperature not in (0, 1) else logits
        logp = torch.log_softmax(scaled, dim=-1)  # [b, V] the policy's: the log-prob reported
        warped = logits
        if self.penalty is not None:
            warped = self.penalty(self.history[live.to(self.history.device)], logits)  # [b, V]
        if self.temperature == 0:
            chosen = warped.argmax(dim=-1)
        else:
            probs = torch.softmax(self.warpers(None, warped), dim=-1)  # [b, V]
            chosen = self._inverse_cdf(probs, live)
        return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)

    def _inverse_cdf(self, probs: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """Token i with cdf[i-1] <= u < cdf[i], u ~ U[0, total): P(i) = p_i exactly.

        One uniform number per row instead of ``torch.multinomial``'s one exponential draw per
        vocabulary entry (27 ms per step at 32 x 49152 here, a quarter of a SmolLM2 decoding step).
        """
        cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # [b, V]
        if self.generators is None:  # one number per row of the original batch, live or not, so the
            # draws do not depend on when finished rows leave the batch
            u = torch.rand((self.rows, 1), dtype=torch.float64, device=probs.device)[live.to(probs.device)]
        else:
            u = torch.cat([torch.rand((1, 1), dtype=torch.float64, device=probs.device, generator=self.generators[int(r)])
                           for r in live])
        u = u * cdf[:, -1:]  # [b, 1]
        return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)
