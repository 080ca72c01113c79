"""The static-shape decoding step for Llama-family models: a fixed KV cache, weights in the compute dtype.

One decoding step of a transformers Llama/Qwen2/Mistral model feeds each row's last drawn token through
the layers and draws the next. This module runs that forward so that a step has the same shapes at every
position and never waits on the host (what a CUDA graph or a whole-step compile needs), and so that it
moves as few bytes as the products need:

- **a KV cache of fixed capacity** per layer ([b, kv_heads, C, head_dim], :class:`StaticCache`), in the
  compute dtype, written at a device-side slot (``index_copy_``); the attention reads the first ``seen``
  slots (the filled length rounded up to ``kv_bucket``) under a [b, C] mask that the step updates in place
  (:class:`~rlvr.rollout.decode_engine.DecodeState`), so within a bucket every step has one shape;
- **weights in the compute dtype, cast once per rollout** (:class:`Projection`): under ``bf16=true``
  (autocast with fp32 master weights) the products read bf16 copies made when the rollout starts, instead
  of autocast casting every fp32 weight again at every position (~3x the bf16 weights' bytes moved per
  position); q/k/v as one product against their stacked weights; on CPU in float32 the weights are
  reordered once into oneDNN's blocked layout (1.3-2.5x faster than ``F.linear`` at decoding shapes, ad-hoc
  timings; docs/performance.md has the engine's measurement).

Numerics are the model's own forward, under the same autocast: its embedding, RMSNorm and rotary modules,
SDPA over the same keys and values (stored in the compute dtype, which is what autocast's SDPA casts them
to), the residual stream in the model's dtype. With ``kv_bucket=1`` (the CPU default) the step attends to
exactly the filled slots: in float32 its logits equal the model's forward on the same cache bit for bit
where the stacked and separate products round alike (tests/rollout/test_static_decoder.py).

GQA attention packs a group's query heads as the query positions of its key/value head, as transformers'
SDPA path does for one query token (so the fp32 result is the same bit for bit, keys are read once per kv
head, and CUDA runs the masked attention in a fused kernel instead of the math fallback that ``enable_gqa``
with a mask takes).

How the step runs (:class:`StepRunner`, below): eagerly (the CPU default), recorded once per attention-length
bucket and replayed as CUDA graphs (the CUDA default), compiled whole, or compiled and recorded.

Used by :class:`~rlvr.rollout.decode_engine.DecodeEngine` (``fused_decoding``, on by default) when
:func:`supports` says the model is a plain (no PEFT adapters, not sharded) Llama-family causal LM with full
attention; otherwise the engine calls the model's forward. Prefill runs the model's forward and its
keys/values are copied in. Not measured on a GPU yet (docs/performance.md, "Decoding at the GPU's limit").
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

logger = logging.getLogger(__name__)

# Decoder layers with the Llama layout (RMSNorm, rotary q/k, GQA attention, SiLU-gated MLP).
MODEL_TYPES = ("llama", "qwen2", "mistral")
# Rotary variants whose module updates its frequencies from the positions it sees (a host-side test of
# the longest position): not a fixed-shape, host-free step.
MOVING_ROPE = ("dynamic", "longrope")


def _parts(model):
    """(decoder body, lm_head) of a transformers *ForCausalLM, or None when it is not one we know."""
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if body is None or head is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        return None
    return body, head


def full_attention_only(config) -> bool:
    """True when every layer of the text model attends to the whole past (no sliding windows)."""
    text = config.get_text_config(decoder=True)
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    return getattr(text, "sliding_window", None) is None or not getattr(text, "use_sliding_window", True)


def supports(model) -> bool:
    """True for a plain Llama/Qwen2/Mistral causal LM whose layers this step reproduces exactly (full
    attention in every layer, a rotary embedding that does not depend on the positions seen)."""
    config = getattr(model, "config", None)
    parts = _parts(model)
    if config is None or parts is None or getattr(config, "model_type", None) not in MODEL_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type") in MOVING_ROPE or not full_attention_only(config):  # sliding windows: not this cache
        return False
    body, head = parts
    linears = [head]
    for layer in body.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or hasattr(attn, "q_norm"):  # Qwen3-style q/k norms: not this layout
            return False
        linears += [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    # exactly nn.Linear (a PEFT LoRA layer or a quantised linear is a subclass or another module),
    # holding ordinary tensors (an FSDP2-sharded weight is a DTensor)
    return all(type(m) is torch.nn.Linear and type(m.weight.data) is torch.Tensor for m in linears)


def kv_bucket_for(device: torch.device) -> int:
    """The attention-length bucket on ``device``: 128 on CUDA (a captured graph per 128 positions), else 1.

    On CUDA a process's first rollout was ~5x slower per position than later ones (H200, 2026-12-04),
    likely set-up per new attention shape; each bucket is one shape (and one CUDA graph). On CPU exact
    lengths keep runs bit-identical to the model's forward.
    """
    return 128 if torch.device(device).type == "cuda" else 1


def compute_dtype(model) -> torch.dtype:
    """The dtype the model's products run in here and now: autocast's when autocast is on for the
    weights' device (``bf16=true``), else the weights' own."""
    weight = next(model.parameters())
    if torch.is_autocast_enabled(weight.device.type):
        return torch.get_autocast_dtype(weight.device.type)
    return weight.dtype


def can_prepack(weight: torch.Tensor) -> bool:
    """oneDNN prepacking applies: a CPU float32 weight and torch built with oneDNN."""
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


class Projection:
    """x @ W^T + b over one or several stacked ``nn.Linear`` layers' weights, in the compute dtype.

    :meth:`refresh` takes the layers' current weights: a weight already in the compute dtype is used as it
    is (no copy); otherwise (stacked, or cast) it is copied into a buffer this object keeps, in place, so a
    captured step that reads the buffer sees the new weights. On CPU float32 the weight is also reordered
    for oneDNN (a new tensor per refresh: CPU steps are not captured).
    """

    def __init__(self, linears: list[torch.nn.Linear], *, dtype: torch.dtype, prepack: bool, batch_hint: int):
        self.linears, self.dtype = linears, dtype
        self.prepack, self.batch_hint = prepack, batch_hint
        self.weight: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.packed: torch.Tensor | None = None
        self.refresh()

    def refresh(self) -> None:
        weights = [m.weight.detach() for m in self.linears]
        if len(weights) == 1 and weights[0].dtype == self.dtype:
            self.weight = weights[0]  # the parameter itself: an in-place optimiser step is seen as it happens
        else:
            if self.weight is None:
                rows = sum(w.shape[0] for w in weights)
                self.weight = weights[0].new_empty((rows, weights[0].shape[1]), dtype=self.dtype)
            start = 0
            for w in weights:  # stacked and cast into the kept buffer
                self.weight[start : start + w.shape[0]].copy_(w)
                start += w.shape[0]
        biases = [m.bias for m in self.linears]
        if all(b is None for b in biases):
            self.bias = None
        else:
            full = torch.cat([b.detach() if b is not None else m.weight.new_zeros(m.out_features)
                              for b, m in zip(biases, self.linears)])
            if self.bias is None or self.bias.shape != full.shape:
                self.bias = full.to(self.dtype)
            else:
                self.bias.copy_(full)
        self.packed = None
        if self.prepack and can_prepack(self.weight):
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, self.batch_hint)
            except (RuntimeError, AttributeError):  # an op this torch build lacks: plain products
                self.packed = None

    def tensors(self) -> list[torch.Tensor]:
        """The weight and bias a step reads (for telling whether a recorded step's inputs moved; a packed
        weight only exists on CPU, where nothing is recorded)."""
        return [t for t in (self.weight, self.bias) if t is not None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)  # what autocast does to a product's input (a no-op without autocast)
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


class StaticCache:
    """Every layer's keys and values in [b, kv_heads, C, head_dim] buffers of the compute dtype."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]):
        self.layers = layers

    @property
    def capacity(self) -> int:
        return self.layers[0][0].shape[2]

    def load_prefill(self, prefill_layers, rows: torch.Tensor, width: int) -> None:
        """Copy a prefill cache's keys/values ([U, kv, P, d] per layer) into the first ``width`` slots,
        row r taking prefill row ``rows[r]`` (a prompt shared by a group is prefilled once)."""
        for (keys, values), layer in zip(self.layers, prefill_layers):
            keys[:, :, :width].copy_(layer.keys[rows])
            values[:, :, :width].copy_(layer.values[rows])

    def select(self, rows: torch.Tensor) -> StaticCache:
        """The cache of ``rows`` only (finished rows leave the batch)."""
        return StaticCache([(k[rows], v[rows]) for k, v in self.layers])


class StaticDecoder:
    """The one-token decoding forward of ``model`` over a :class:`StaticCache`.

    Args:
        model: a model :func:`supports` accepts.
        prepack: reorder CPU float32 weights for oneDNN (see :class:`Projection`).
        batch_hint: the decoding batch the packed layout is chosen for (any batch works).
    """

    def __init__(self, model, *, prepack: bool = True, batch_hint: int = 32):
        self.model, self.prepack = model, prepack
        self.body, head = _parts(model)
        self.dtype = compute_dtype(model)
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = self.body.layers[0].self_attn.head_dim
        self.q_size = self.heads * self.head_dim
        self.kv_size = self.kv_heads * self.head_dim
        options = {"dtype": self.dtype, "prepack": prepack, "batch_hint": batch_hint}
        self.layers = []
        for layer in self.body.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append({
                "qkv": Projection([attn.q_proj, attn.k_proj, attn.v_proj], **options),
                "o": Projection([attn.o_proj], **options), "gate": Projection([mlp.gate_proj], **options),
                "up": Projection([mlp.up_proj], **options), "down": Projection([mlp.down_proj], **options)})
        self.head = Projection([head], **options)

    def refresh(self) -> None:
        """Take the model's current weights (after an update), cast once, into the same buffers."""
        for projections in self.layers:
            for projection in projections.values():
                projection.refresh()
        self.head.refresh()

    def _projection_tensors(self) -> list[torch.Tensor]:
        return [t for p in (*(p for layer in self.layers for p in layer.values()), self.head) for t in p.tensors()]

    def owned(self) -> list[torch.Tensor]:
        """The weights this decoder holds itself (stacked or cast copies; a weight used as it is is the model's)."""
        model = {p.data_ptr() for p in self.model.parameters()}
        return [t for t in self._projection_tensors() if t.data_ptr() not in model]

    def inputs(self) -> list[int]:
        """The addresses of every tensor a step reads besides its state and cache: the model's own parameters
        and buffers (embedding, norms, rotary frequencies) and the projections' weights. A captured step is
        valid while these stay where they were."""
        return [t.data_ptr() for t in (*self.model.parameters(), *self.model.buffers(), *self._projection_tensors())]

    def new_cache(self, batch: int, capacity: int, device) -> StaticCache:
        shape = (batch, self.kv_heads, capacity, self.head_dim)
        return StaticCache([(torch.zeros(shape, dtype=self.dtype, device=device),
                             torch.zeros(shape, dtype=self.dtype, device=device)) for _ in self.layers])

    def forward(self, ids: torch.Tensor, position: torch.Tensor, slot: torch.Tensor, attend: torch.Tensor,
                cache: StaticCache) -> torch.Tensor:
        """Logits [b, V] of the token after ``ids`` [b]; its keys/values are written at cache slot ``slot``.

        ``position`` [b] the tokens' rotary positions; ``slot`` [1] their cache slot; ``attend`` [b, L] the
        slots each row attends to, L <= the cache's capacity (the keys read are the first L slots).
        """
        batch, seen = ids.shape[0], attend.shape[1]
        hidden = self.body.embed_tokens(ids[:, None])  # [b, 1, H]
        cos, sin = self.body.rotary_emb(hidden, position[:, None])
        mask = attend[:, None, None, :]  # [b, 1, 1, L]
        for layer, proj, (keys, values) in zip(self.body.layers, self.layers, cache.layers):
            x = layer.input_layernorm(hidden)
            q, k, v = proj["qkv"](x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = q.view(batch, 1, self.heads, self.head_dim).transpose(1, 2)  # [b, h, 1, d]
            k = k.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)  # [b, kv, 1, d]
            v = v.view(batch, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys.index_copy_(2, slot, k.to(keys.dtype))
            values.index_copy_(2, slot, v.to(values.dtype))
            # GQA: a group's query heads as the query positions of its key/value head ([b, kv, h/kv, d]), as
            # transformers' SDPA path does for one query token: keys read once per kv head, and a masked
            # attention that CUDA runs in a fused kernel (enable_gqa with a mask falls back to the math kernel)
            out = F.scaled_dot_product_attention(q.to(keys.dtype).reshape(batch, self.kv_heads, -1, self.head_dim),
                                                 keys[:, :, :seen], values[:, :, :seen], attn_mask=mask,
                                                 scale=layer.self_attn.scaling)  # [b, kv, h/kv, d]
            hidden = hidden + proj["o"](out.reshape(batch, 1, self.q_size))
            x = layer.post_attention_layernorm(hidden)
            hidden = hidden + proj["down"](F.silu(proj["gate"](x)) * proj["up"](x))
        return self.head(self.body.norm(hidden))[:, 0, :]


# ---------------------------------------------------------------------------------------- running the step
# A decoding step of a 1.5B model dispatches ~1 500 operations on a few hundred kilobytes of activations;
# launched one by one from Python the host sets the pace (~18 us an operation) and the GPU idles. A CUDA graph
# records the step's kernels once per shape and replays them with one launch; ``torch.compile`` fuses the
# element-wise work (norms, rotary, activation, the sampler's arithmetic) into fewer kernels. The step
# (:func:`decode_step`) reads and writes only tensors that exist before it runs (the decoding state, the static
# cache, the weights), so a replay computes the next position from the same addresses.
#
# Modes: ``eager`` (the CPU default), ``graph`` (the CUDA default: the eager step, recorded), ``compile``
# (``torch.compile(fullgraph=True)`` of the step, not recorded), ``compile+graph`` (the compiled step, recorded).
# Which is fastest on a GPU is for benchmarks/bench_decode.py to measure. Recording per shape (the attention
# length ``seen``, one per ``kv_bucket`` positions): the first step of a shape runs as it is, on a side stream
# (lazy initialisation, autotuning), the second is recorded (recording runs nothing) and then replayed, every
# later one replayed. All graphs share one memory pool (they never run at the same time).

COMPILE_BACKEND = "inductor"  # torch.compile's backend for the compiled modes (tests trace with "eager")
MODES = ("eager", "graph", "compile", "compile+graph")


def default_mode(device) -> str:
    """``graph`` on CUDA, ``eager`` elsewhere."""
    return "graph" if torch.device(device).type == "cuda" else "eager"


def decode_step(decoder, sampler, state, cache, seen: int) -> None:
    """One position: feed every row's last token, draw the next, keep it (all in place, on the device).

    ``seen``: the cache slots the attention reads (the filled ones, or more, masked).
    """
    state.feed()
    logits = decoder.forward(state.ids, state.position, state.slot, state.attend[:, :seen], cache)  # [b, V]
    chosen, logprobs = sampler(logits, state.seed_words, state.step, state.history)  # [b], [b]
    state.record(chosen, logprobs)


def _autocast_for_capture(device_type: str):
    """The caller's autocast, without its cast cache (cached casts made while recording would live in the
    graph's memory pool and be freed under it)."""
    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.get_autocast_dtype(device_type), cache_enabled=False)


class StepRunner:
    """Runs :func:`decode_step` for one decoder, sampler, state and cache in the given mode.

    A recording that fails (the graph modes first ran on a GPU after they were written) costs speed, not the
    rollout: one warning, the step run as it is, and this runner stays without graphs from then on.

    Args:
        decoder, sampler, state, cache: what every step reads and writes (fixed for the runner's life:
            a recorded graph replays on these very tensors).
        mode: one of :data:`MODES` (the graph modes need CUDA: the engine checks the device).
    """

    def __init__(self, decoder, sampler, state, cache, *, mode: str):
        if mode not in MODES:
            raise ValueError(f"unknown decoding step mode {mode!r}: choose one of {list(MODES)}")
        self.decoder, self.sampler, self.state, self.cache = decoder, sampler, state, cache
        self.mode = mode
        self.fn = (torch.compile(decode_step, fullgraph=True, backend=COMPILE_BACKEND) if "compile" in mode
                   else decode_step)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.warmed: set[int] = set()
        self.pool = None
        self.captures = 0  # graphs recorded (one per shape)

    def __call__(self, seen: int) -> None:
        if "graph" not in self.mode:
            self.fn(self.decoder, self.sampler, self.state, self.cache, seen)
            return
        graph = self.graphs.get(seen)
        if graph is None:
            graph = self._first_steps(seen)
            if graph is None:
                return
        graph.replay()

    def _first_steps(self, seen: int):
        """The warm-up step of a new shape (run, returns None), or its recording (returns the graph)."""
        device_type = self.state.ids.device.type
        args = (self.decoder, self.sampler, self.state, self.cache, seen)
        if seen not in self.warmed:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), _autocast_for_capture(device_type):
                self.fn(*args)
            torch.cuda.current_stream().wait_stream(side)
            self.warmed.add(seen)
            return None
        graph = torch.cuda.CUDAGraph()
        try:
            with _autocast_for_capture(device_type), torch.cuda.graph(graph, pool=self.pool):
                self.fn(*args)  # recorded, not run
        except RuntimeError as error:
            logger.warning("rlvr's decoding step: recording it as a CUDA graph failed (%s); this engine decodes "
                           "without graphs from now on (slower, the same responses). Please report it.",
                           str(error).splitlines()[0] if str(error) else type(error).__name__)
            self.mode, self.graphs = self.mode.replace("+graph", "").replace("graph", "eager"), {}
            self.fn(*args)  # the step the failed recording did not run
            return None
        self.pool = graph.pool()
        self.graphs[seen] = graph
        self.captures += 1
        return graph
