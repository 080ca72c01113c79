"""rlvr's rollout engine: a sampling loop whose steps stay on the device.

Same contract and same warps as :class:`~rlvr.rollout.hf_engine.HFEngine` (transformers' ``generate``),
less of the work:

- **shared prefill**: a prompt repeated G times (a GRPO group) is run through the model once; its
  keys/values are copied to the G rows;
- **a static decoding step** (:mod:`rlvr.rollout.static_decoder`) for Llama-family models: a fixed KV
  cache written at a device-side slot, weights in the compute dtype cast once per rollout, one shape per
  attention-length bucket, run eagerly on CPU and replayed as a CUDA graph on CUDA
  (:class:`~rlvr.rollout.static_decoder.StepRunner`); other models decode through their own forward and a preallocated
  cache (:mod:`rlvr.rollout.kv_cache`);
- **sampling on the device** (:class:`DeviceSampler`, below): each row's uniform
  number is a function of its seed and the response position (:func:`uniform`, below), so a
  row's response does not depend on the rest of the batch; the tokens, log-probs, lengths and "done"
  flags stay on the device (:class:`DecodeState`, below) and the host reads the flags
  every ``sync_every`` positions (to stop once every row has ended) and everything once at the end;
- **finished rows leave the batch** on CPU (``compact_below``): there a step's cost follows the rows it
  decodes; on CUDA the batch stays fixed (a decoding step reads every weight whatever its batch, and a
  fixed batch is one graph), finished rows decoded and ignored;
- **sampling log-probs computed in the loop** from one [b, V] row of logits per step; the
  [n, T, V] logits ``generate(output_logits=True)`` keeps are never stored.

Seeds: ``row_seeds`` gives row r the stream of seed r; without them each row's seed is drawn from torch's
global generator (so ``generator_seed`` repeats a call).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

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

from rlvr.rollout import static_decoder
from rlvr.rollout.base import LocalEngine, left_pad
from rlvr.rollout.completion import Completion
from rlvr.rollout.kv_cache import CACHE_KWARG, make_cache
from rlvr.rollout.sampling import Sampling


class DecodeEngine(LocalEngine):
    """Batched sampling with shared prefill, a static decoding step and on-device draws.

    Args:
        model, pad_token_id, eos_token_ids, max_batch_size: as :class:`~rlvr.rollout.base.LocalEngine`.
        fused: decode Llama-family models with the static step (:mod:`rlvr.rollout.static_decoder`) when
            :func:`~rlvr.rollout.static_decoder.supports` allows; False always calls the model's forward.
        kv_bucket: the static step's attention reads the filled cache slots rounded up to a multiple of this
            (masked): one shape per bucket. None: :func:`~rlvr.rollout.static_decoder.kv_bucket_for` the
            model's device (128 on CUDA, 1 elsewhere).
        capture: how the static step runs (:data:`~rlvr.rollout.static_decoder.MODES`); None:
            :func:`~rlvr.rollout.static_decoder.default_mode` (``graph`` on CUDA, ``eager`` elsewhere).
        compact_below: at a read-back, drop finished rows once the live fraction of the batch falls below
            this; 0 never drops them. None: 1 for the eager step on CPU (measured fastest there: each drop
            copies the live rows' cache, cheaper than decoding a dead row), else 0. The recorded and compiled
            modes need 0: their state, cache and graphs are kept across calls for one batch size.
        sync_every: read the "done" flags back every this many positions (each read waits for the device);
            None: 1 on CPU (free there), 16 elsewhere.
    """

    supports_row_seeds = True  # generate(row_seeds=...): a request's draws do not depend on its batch

    def __init__(self, model, *, pad_token_id: int, eos_token_ids: list[int], max_batch_size: int = 64,
                 compact_below: float | None = None, fused: bool = True, kv_bucket: int | None = None,
                 capture: str | None = None, sync_every: int | None = None):
        super().__init__(model, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids,
                         max_batch_size=max_batch_size)
        if capture is not None and capture not in static_decoder.MODES:
            raise ValueError(f"capture={capture!r}: choose one of {list(static_decoder.MODES)} (or None: by device)")
        if sync_every is not None and sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.compact_below, self.fused, self.kv_bucket = compact_below, fused, kv_bucket
        self.capture, self.sync_every = capture, sync_every
        self._decoder: static_decoder.StaticDecoder | None = None
        # recorded/compiled modes: per batch size, the state, cache and graphs kept across calls
        self._workspaces: dict[int, _Workspace] = {}

    def generate(self, prompts, **kwargs) -> list[Completion]:
        try:
            return super().generate(prompts, **kwargs)
        finally:  # eager: the cast/packed weights are this call's copy, dropped; the recorded/compiled modes keep
            # theirs (and their graphs) while they take little of the device, else they too are made per call
            if not self._workspaces or self._kept_bytes() > KEEP_FRACTION * _device_total(self.model):
                self._decoder, self._workspaces = None, {}

    def _kept_bytes(self) -> int:
        """What the kept decoder and workspaces hold: the cast weights it owns, the caches and states."""
        tensors = [] if self._decoder is None else self._decoder.owned()
        for ws in self._workspaces.values():
            tensors += [t for pair in ws.cache.layers for t in pair]
            tensors += [t for t in vars(ws.state).values() if isinstance(t, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in tensors)

    # ------------------------------------------------------------------ settings by device
    def _settings(self, device) -> tuple[str, float, int, int]:
        """(capture mode, compact_below, sync_every, kv_bucket) for ``device``."""
        cpu = torch.device(device).type == "cpu"
        mode = self.capture or static_decoder.default_mode(device)
        compact = self.compact_below if self.compact_below is not None else (1.0 if cpu and mode == "eager" else 0.0)
        if mode != "eager" and compact > 0:
            raise ValueError(f"compact_below={compact} with capture={mode!r}: a recorded or compiled step is kept for "
                             "one batch size; set compact_below=0 or capture='eager'")
        if "graph" in mode and torch.device(device).type != "cuda":
            raise ValueError(f"capture={mode!r} records CUDA graphs: it needs the model on a CUDA device (this one "
                             f"is on {device}); use capture='eager' or 'compile'")
        sync = self.sync_every or (1 if cpu else 16)
        return mode, compact, sync, self.kv_bucket or static_decoder.kv_bucket_for(device)

    def _static_decoder(self, batch: int, mode: str):
        """The static step's weights (refreshed: always the current ones), or None for the model's forward.
        Compiled modes take plain weights (oneDNN's prepacked ones cannot enter a compiled graph)."""
        if not (self.fused and static_decoder.supports(self.model)):
            return None
        dtype, prepack = static_decoder.compute_dtype(self.model), "compile" not in mode
        if self._decoder is None or self._decoder.dtype != dtype or self._decoder.prepack != prepack:
            self._decoder = static_decoder.StaticDecoder(self.model, prepack=prepack, batch_hint=batch)
            self._workspaces = {}
        else:
            self._decoder.refresh()
        return self._decoder

    # ------------------------------------------------------------------ one batch
    def _generate_chunk(self, prompts, max_new_tokens, sampling: Sampling, row_seeds) -> list[Completion]:
        device = next(self.model.parameters()).device
        n = len(prompts)
        mode, compact_below, sync_every, bucket = self._settings(device)
        seeds = row_seeds if row_seeds is not None else torch.randint(0, 2**63 - 1, (n,)).tolist()
        unique: dict[tuple[int, ...], int] = {}
        row_prompt = torch.tensor([unique.setdefault(tuple(p), len(unique)) for p in prompts], device=device)  # [n]
        prompt_ids, prompt_mask = (x.to(device) for x in left_pad(list(unique), self.pad_token_id))  # [U, P]
        width = prompt_ids.shape[1]

        # Prefill each distinct prompt once (the model's forward), then give every row its prompt's keys/values.
        decoder = self._static_decoder(n, mode)
        prefill = make_cache(self.model.config, width + max_new_tokens) if decoder is None else DynamicCache(
            config=self.model.config)  # the static step copies the prompts' keys/values into its own cache
        out = self.model(input_ids=prompt_ids, attention_mask=prompt_mask,
                         position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
                         **{CACHE_KWARG: prefill}, use_cache=True, logits_to_keep=1)
        fresh = lambda capacity: DecodeState.start(
            prompt_ids[row_prompt], prompt_mask[row_prompt], capacity=capacity, max_new_tokens=max_new_tokens,
            seed_words=split_seeds(seeds, device), eos_token_ids=self.eos_token_ids,
            pad_token_id=self.pad_token_id)
        if decoder is None:
            prefill.batch_select_indices(row_prompt)
            stepper = _ModelForward(self.model, prefill, DeviceSampler(sampling, device), fresh(width + max_new_tokens))
        elif mode != "eager":
            stepper = self._workspace_for(decoder, fresh, n, width, max_new_tokens, sampling, mode, bucket)
            stepper.cache.load_prefill(prefill.layers, row_prompt, width)
        else:
            state = fresh(width + max_new_tokens)
            cache = decoder.new_cache(n, width + max_new_tokens, device)
            cache.load_prefill(prefill.layers, row_prompt, width)
            stepper = _Static(static_decoder.StepRunner(decoder, DeviceSampler(sampling, device), state, cache,
                                                      mode=mode), bucket)
        del prefill
        state = stepper.state
        chosen, logprobs = stepper.sampler(out.logits[row_prompt, -1, :], state.seed_words, state.step, state.history)
        state.record(chosen, logprobs)
        return self._decode(stepper, width=width, max_new_tokens=max_new_tokens, compact_below=compact_below,
                            sync_every=sync_every)

    def _decode(self, stepper, *, width: int, max_new_tokens: int, compact_below: float,
                sync_every: int) -> list[Completion]:
        """Positions 1 .. T-1 (position 0 is drawn from the prefill), then the completions."""
        n = stepper.state.tokens.shape[0]
        results = _Results(n, max_new_tokens, self.pad_token_id)
        rows = torch.arange(n)  # the original row of each batch row
        for t in range(1, max_new_tokens):
            if (t - 1) % sync_every == 0:  # the one place the host waits for the device
                done = stepper.state.done.cpu()
                if bool(done.all()):
                    break
                if int((~done).sum()) < compact_below * len(rows):
                    results.take(stepper.state, rows, done)
                    keep = (~done).nonzero().squeeze(-1)
                    stepper.select(keep.to(stepper.state.ids.device))
                    rows = rows[keep]
            stepper.step(filled=width + t)
        results.take(stepper.state, rows, torch.ones(len(rows), dtype=torch.bool))
        return results.completions(max_new_tokens)

    def _workspace_for(self, decoder, fresh, n: int, width: int, max_new_tokens: int, sampling: Sampling,
                       mode: str, bucket: int) -> _Static:
        """The stepper over the tensors kept for batch size ``n`` when they serve this call (so its recorded graphs
        replay and its compiled step is not traced again), else new ones: a capacity rounded up to the bucket (a
        larger kept one serves), the same response length, EOS count and mode, and every weight where it was."""
        ws, inputs = self._workspaces.get(n), decoder.inputs()
        needed = -(-(width + max_new_tokens) // bucket) * bucket
        if ws is None or ws.cache.capacity < needed or ws.state.tokens.shape[1] != max_new_tokens \
                or ws.inputs != inputs or ws.mode != mode or ws.state.eos.shape[0] != len(self.eos_token_ids):
            if ws is not None and ws.inputs != inputs:  # weights moved: every kept graph reads stale addresses
                self._workspaces = {}
            state = fresh(needed)
            cache = decoder.new_cache(n, needed, state.ids.device)
            ws = self._workspaces[n] = _Workspace(mode, inputs, state, cache, {})
        else:
            ws.state.copy_(fresh(ws.cache.capacity))
        if sampling not in ws.steppers:
            runner = static_decoder.StepRunner(decoder, DeviceSampler(sampling, ws.state.ids.device), ws.state,
                                             ws.cache, mode=mode)
            ws.steppers[sampling] = _Static(runner, bucket)
        return ws.steppers[sampling]


# The recorded/compiled modes keep their weights, caches and graphs across calls while these take at most this
# share of the device (1.5B, bf16=true, 64 rows: ~4.3 GB of an H200's 139 GiB; 7B: ~17 GB of an 80 GB GPU is
# made per call instead, as the update may need it).
KEEP_FRACTION = 0.1


def _device_total(model) -> int:
    """The total memory of the model's device (a CUDA GPU's, else the machine's RAM)."""
    device = next(model.parameters()).device
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _Static:
    """Decoding steps by the static step (eager, compiled or replayed)."""

    def __init__(self, runner: static_decoder.StepRunner, bucket: int):
        self.runner, self.bucket = runner, bucket
        self.sampler, self.cache, self.state = runner.sampler, runner.cache, runner.state

    def step(self, *, filled: int) -> None:
        """One position; ``filled``: the cache slots in use once the fed token is written."""
        self.runner(min(self.cache.capacity, -(-filled // self.bucket) * self.bucket))

    def select(self, rows: torch.Tensor) -> None:
        """Keep ``rows`` only (eager modes): a new state, cache and runner."""
        self.state, self.cache = self.state.select(rows), self.cache.select(rows)
        self.runner = static_decoder.StepRunner(self.runner.decoder, self.sampler, self.state, self.cache,
                                              mode=self.runner.mode)


class _ModelForward:
    """Decoding steps by the model's own forward over a transformers cache (models the static step does not cover)."""

    def __init__(self, model, cache, sampler: DeviceSampler, state: DecodeState):
        self.model, self.cache, self.sampler, self.state = model, cache, sampler, state

    def step(self, *, filled: int) -> None:
        state = self.state
        state.feed()
        logits = self.model(input_ids=state.ids[:, None], attention_mask=state.attend[:, :filled].long(),
                            position_ids=state.position[:, None], **{CACHE_KWARG: self.cache},
                            use_cache=True).logits[:, -1, :]  # [b, V]
        chosen, logprobs = self.sampler(logits, state.seed_words, state.step, state.history)
        state.record(chosen, logprobs)

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.state = self.state.select(rows)


@dataclass
class _Workspace:
    """Recorded/compiled modes: the tensors the step reads and writes, kept across calls with its graphs (for the
    batch size it is kept under; its capacity is its cache's, its response length its state's)."""

    mode: str
    inputs: list[int]  # StaticDecoder.inputs() when made: the graphs are valid while these stay
    state: DecodeState
    cache: object  # StaticCache
    steppers: dict  # Sampling -> _Static (its runner holds the graphs)


class _Results:
    """The host's copy of each original row's response, filled as rows leave the batch and at the end."""

    def __init__(self, n: int, max_new_tokens: int, pad_token_id: int):
        self.tokens = torch.full((n, max_new_tokens), pad_token_id, dtype=torch.long)  # [n, T]
        self.logprobs = torch.zeros((n, max_new_tokens))  # [n, T]
        self.lengths = torch.zeros(n, dtype=torch.long)
        self.ended = torch.zeros(n, dtype=torch.bool)

    def take(self, state: DecodeState, rows: torch.Tensor, which: torch.Tensor) -> None:
        """Copy the batch rows selected by ``which`` [b] bool (original rows ``rows[which]``) from the device."""
        index = which.nonzero().squeeze(-1)
        on_device = index.to(state.ids.device)
        targets = rows[index]
        self.tokens[targets] = state.tokens[on_device].cpu()
        self.logprobs[targets] = state.logprobs[on_device].cpu()
        self.lengths[targets] = state.lengths[on_device].cpu()
        self.ended[targets] = state.done[on_device].cpu()

    def completions(self, max_new_tokens: int) -> list[Completion]:
        return [Completion(self.tokens[r, :length].tolist(), self.logprobs[r, :length].tolist(),
                           truncated=not bool(self.ended[r]) and int(length) >= max_new_tokens)
                for r, length in enumerate(self.lengths.tolist())]


# ---------------------------------------------------------------------------------------- the decoding state
# A rollout's prompts are left-padded to one width P, so every row writes the token it feeds at the same cache
# slot (``slot``), while each row's rotary position (``position``) counts its own prompt's tokens. The drawn
# tokens, their log-probs, each row's length and "done" flag stay on the device until the host reads them back
# (every ``sync_every`` positions to stop early, and once at the end), and a finished row stays in the batch
# with its later draws ignored: so a step has the same shapes at every position and touches the host never,
# which is what recording it as a CUDA graph, or compiling it whole, needs.

@dataclass
class DecodeState:
    """One rollout's decoding state; b rows, C cache slots, T response positions."""

    ids: torch.Tensor  # [b] the last token drawn: the one the next step feeds
    position: torch.Tensor  # [b] its rotary position
    slot: torch.Tensor  # [1] its cache slot, the same for every row (before the first draw: the last prompt token's)
    step: torch.Tensor  # [1] the response position the next draw fills (the counter of every row's stream)
    attend: torch.Tensor  # [b, C] bool: the cache slots each row attends to (its prompt and its response)
    seed_words: torch.Tensor  # [b, 2] int64 each row's seed (split_seeds)
    tokens: torch.Tensor  # [b, T] the response tokens (pad after a row's end)
    logprobs: torch.Tensor  # [b, T] float32 their sampling log-probs (0 after a row's end)
    lengths: torch.Tensor  # [b] tokens each row produced
    done: torch.Tensor  # [b] bool: the row drew an EOS
    eos: torch.Tensor  # [E] the ids that end a response
    history: torch.Tensor  # [b, C] the rows' tokens by slot, read by the repetition penalty
    pad_token_id: int

    @classmethod
    def start(cls, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, *, capacity: int, max_new_tokens: int,
              seed_words: torch.Tensor, eos_token_ids: list[int], pad_token_id: int) -> DecodeState:
        """The state before the first draw, for left-padded prompts ``prompt_ids`` / ``prompt_mask`` [b, P].

        In the history, padding and the slots not generated yet hold the row's first prompt token, a token
        the row already has: the repetition penalty (applied once per distinct token) sees exactly the row's
        tokens. (Kept whatever the sampling: one [b] write a step, and one state serves every sampling.)
        """
        b, width = prompt_ids.shape
        device = prompt_ids.device
        attend = torch.zeros((b, capacity), dtype=torch.bool, device=device)  # [b, C]
        attend[:, :width] = prompt_mask.bool()
        pads = (prompt_mask == 0).sum(-1, keepdim=True).clamp(max=width - 1)  # [b, 1]
        first = prompt_ids.gather(1, pads)  # [b, 1]
        history = first.expand(-1, capacity).clone()  # [b, C]
        history[:, :width] = torch.where(prompt_mask.bool(), prompt_ids, first)
        long = {"dtype": torch.long, "device": device}
        return cls(ids=torch.full((b,), pad_token_id, **long), position=prompt_mask.sum(-1).long() - 1,
                   slot=torch.full((1,), width - 1, **long), step=torch.zeros(1, **long), attend=attend,
                   seed_words=seed_words.to(device), tokens=torch.full((b, max_new_tokens), pad_token_id, **long),
                   logprobs=torch.zeros((b, max_new_tokens), dtype=torch.float32, device=device),
                   lengths=torch.zeros(b, **long), done=torch.zeros(b, dtype=torch.bool, device=device),
                   eos=torch.tensor(eos_token_ids, **long), history=history, pad_token_id=pad_token_id)

    def feed(self) -> None:
        """Before a step's forward: every row attends to the fed token's slot."""
        self.attend.index_fill_(1, self.slot, True)

    def record(self, chosen: torch.Tensor, logprobs: torch.Tensor) -> None:
        """Keep the draws ``chosen`` [b] and their ``logprobs`` [b] at this response position; rows that
        ended earlier keep pad and 0. The drawn token is what the next step feeds."""
        live = ~self.done  # [b]
        self.tokens.index_copy_(1, self.step, torch.where(live, chosen, self.pad_token_id)[:, None])
        self.logprobs.index_copy_(1, self.step, torch.where(live, logprobs.float(), 0.0)[:, None])
        self.lengths += live
        self.done |= (chosen[:, None] == self.eos[None, :]).any(-1)
        self.ids.copy_(chosen)
        self.position += 1
        self.slot += 1
        self.step += 1
        self.history.index_copy_(1, self.slot, chosen[:, None])

    def select(self, rows: torch.Tensor) -> DecodeState:
        """The state of ``rows`` (indices into the batch) only: finished rows leave the batch."""
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("ids", "position", "attend", "seed_words", "tokens", "logprobs", "lengths", "done", "history"):
            kept[name] = kept[name][rows]
        return DecodeState(**kept)

    def copy_(self, other: DecodeState) -> None:
        """Take ``other``'s values into this state's tensors (same shapes), so a captured step that reads and
        writes these tensors serves another rollout."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, torch.Tensor):
                mine.copy_(theirs)
            elif mine != theirs:
                raise ValueError(f"decoding state: {f.name} {theirs!r} cannot replace {mine!r} in place")


# ---------------------------------------------------------------------------------------- drawing on the device
# x ~ softmax(warp(logits)) with transformers' own processors in ``generate``'s order (repetition penalty, then
# temperature, top_k, top_p, min_p: rlvr.rollout.sampling), drawn by inverse-CDF sampling with one uniform
# number per row, u = uniform(row seed, response position): token i with cdf[i-1] <= u * total < cdf[i], so
# P(i) = p_i exactly, and a row's draw depends on its seed, its position and its logits only. Temperature 0 is
# greedy (argmax of the penalised logits). The log-prob returned is log softmax(logits / T)[x] (the warps not
# renormalised into it: the trainer's convention; T = 1 when greedy). Every operation stays on the device with a
# shape fixed by the batch and the vocabulary. Inverse-CDF sampling, not ``torch.multinomial``: multinomial draws
# one exponential per vocabulary entry (27 ms per step at 32 x 49 152 on the CPU, a quarter of a SmolLM2 step).

class DeviceSampler:
    """The token and its sampling log-prob for each row of a [b, V] logits tensor.

    Args:
        sampling: temperature, top_p, top_k, min_p, repetition_penalty.
        device: where the draws run (the logits' device).
    """

    def __init__(self, sampling: Sampling, device):
        self.temperature = sampling.temperature
        self.penalty = (RepetitionPenaltyLogitsProcessor(float(sampling.repetition_penalty))
                        if sampling.repetition_penalty != 1 else None)
        warpers = []
        if self.temperature > 0:  # generate's order: temperature, top_k, top_p, min_p
            warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k > 0:
                warpers.append(TopKLogitsWarper(sampling.top_k))
            if sampling.top_p < 1.0:
                warpers.append(TopPLogitsWarper(sampling.top_p))
            if sampling.min_p is not None:
                warpers.append(MinPLogitsWarper(sampling.min_p))
        self.warpers = LogitsProcessorList(warpers)
        self.lanes = lane_constants(device)  # made here: creating it in a captured step copies from the host

    def __call__(self, logits: torch.Tensor, seed_words: torch.Tensor, position: torch.Tensor,
                 history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen [b], log softmax(logits / T)[chosen] [b] float32).

        Args:
            logits: [b, V] the next token's logits (any float dtype).
            seed_words: [b, 2] int64 each row's seed (:func:`split_seeds`).
            position: 1-element int64, the response position drawn (the counter of every row's stream).
            history: [b, W] int64 each row's tokens so far, padded with a token the row has
                (read by the repetition penalty only).
        """
        logits = logits.float()  # [b, V]
        scaled = logits / self.temperature if self.temperature not in (0, 1) else logits
        logp = torch.log_softmax(scaled, dim=-1)  # [b, V] the policy's: the log-prob reported
        warped = self.penalty(history, logits) if self.penalty is not None else logits  # [b, V]
        if self.temperature == 0:
            chosen = warped.argmax(dim=-1)  # [b]
        else:
            probs = torch.softmax(self.warpers(None, warped), dim=-1)  # [b, V]
            cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # [b, V]
            u = uniform(seed_words, position, self.lanes)[:, None] * cdf[:, -1:]  # [b, 1]
            chosen = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)
        return chosen, logp.gather(-1, chosen[:, None]).squeeze(-1)


# ---------------------------------------------------------------------------------------- u(seed, position)
# A pure function of a row's 63-bit seed and the response position: no per-row torch.Generator, no host round
# trip, nothing that stops the step from being recorded or compiled. The mixing function is ``lowbias32`` (Chris
# Wellons' integer-hash search, "Prospecting for Hash Functions", 2018: x ^= x >> 16; x *= 0x21f0aaad;
# x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15, on 32-bit words). Both multipliers are below 2^31, so a 32-bit
# word times one fits in int64 without overflow; each product is reduced mod 2^32 by a mask. Two lanes (the
# result's high and low words) absorb the seed's two halves and the position, each with its own constants.
# A statistical generator, not a cryptographic one: tests/rollout/test_counter_rng.py checks it against a
# pure-Python reference, its uniformity, and the independence of neighbouring seeds and positions.

_M32 = 0xFFFFFFFF
_MUL1, _MUL2 = 0x21F0AAAD, 0x735A2D97  # lowbias32's multipliers (both < 2^31)
# Two lanes (the high and the low word of the result), each absorbing the same words with its own
# constants: [absorbed word, lane] (odd 32-bit constants from the golden ratio, murmur3 and xxhash).
_LANES = ((0x9E3779B9, 0x85EBCA6B), (0xC2B2AE35, 0x27D4EB2F), (0x165667B1, 0xD3A2646C), (0xFD7046C5, 0xB55A4F09))


def _mix(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 on int64 tensors holding 32-bit words (values in [0, 2^32))."""
    x = x ^ (x >> 16)
    x = (x * _MUL1) & _M32
    x = x ^ (x >> 15)
    x = (x * _MUL2) & _M32
    return x ^ (x >> 15)


def lane_constants(device) -> torch.Tensor:
    """[4, 2] int64: the constants :func:`uniform` absorbs, made once per rollout (creating them inside a
    captured step would copy from the host)."""
    return torch.tensor(_LANES, dtype=torch.long, device=device)


def split_seeds(seeds: list[int], device) -> torch.Tensor:
    """63-bit (or smaller, non-negative) seeds -> [n, 2] int64 of their (high, low) 32-bit words."""
    words = [((int(s) % (1 << 63)) >> 32, int(s) & _M32) for s in seeds]
    return torch.tensor(words, dtype=torch.long, device=device).view(len(seeds), 2)


def uniform(seed_words: torch.Tensor, counter: torch.Tensor, lanes: torch.Tensor) -> torch.Tensor:
    """u[i] ~ U[0, 1), a function of (seed_words[i], counter) only.

    Args:
        seed_words: [n, 2] int64, each row's seed as (high, low) 32-bit words (:func:`split_seeds`).
        counter: a 1-element (or [n, 1]) int64 tensor, the position in the row's stream (0 <= t < 2^32).
        lanes: :func:`lane_constants` on the same device.

    Returns:
        [n] float64 in [0, 1) with 53 random bits.
    """
    h = _mix(seed_words[:, :1] ^ lanes[0])  # [n, 2] one 32-bit state per lane
    h = _mix(h ^ seed_words[:, 1:] ^ lanes[1])
    h = _mix(h ^ counter ^ lanes[2])
    h = _mix(h ^ lanes[3])
    bits = ((h[:, 0] >> 5) << 26) | (h[:, 1] >> 6)  # 27 + 26 = 53 bits
    return bits.double() * (1.0 / (1 << 53))
