"""The KV cache the model's own forward decodes with: allocated once per generation, rows can leave it.

transformers' ``DynamicCache`` concatenates every new key/value onto the old ones, copying the whole
cache at every decoding step (measured: a quarter of a SmolLM2 decoding step at batch 32).
:class:`PreallocatedLayer` writes into a buffer sized for prompt + max_new_tokens and hands the attention
the filled prefix as a view; ``batch_select_indices`` (inherited API) keeps only the given rows, so the
decoding batch shrinks as responses finish.

Only full-attention layers are supported; :func:`make_cache` falls back to ``DynamicCache`` for models
with sliding-window or other layer kinds. Used for every prefill, and for decoding models the static step
(:mod:`rlvr.rollout.static_decoder`) does not cover.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer
from transformers.models.llama.modeling_llama import LlamaModel

from rlvr.rollout.static_decoder import full_attention_only

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


def make_cache(config, capacity: int) -> Cache:
    """A preallocated cache of ``capacity`` tokens when the model allows it, else a DynamicCache."""
    if full_attention_only(config):
        text = config.get_text_config(decoder=True)
        return Cache(layers=[PreallocatedLayer(capacity) for _ in range(text.num_hidden_layers)])
    return DynamicCache(config=config)
