"""The update's batches and the model passes over them.

Cutting (the update's batching, beside ``rlvr.train.update`` so that the update reads as the algorithm):
``minibatches`` (whole groups per optimiser step), ``rank_share`` (each process's share of a mini-batch: whole
pools), ``length_buckets`` (micro-batches of similar lengths, bounded in rows and tokens), ``pad_rows``;
an optimiser step's inputs (:class:`OptimizerBatch`) and one micro-batch's inputs to the loss (:class:`LossInputs`).

Scoring: the per-token log-probs and entropy of (prompt, response) token sequences under a model
(``collate``, ``response_logprobs``, ``response_logprobs_no_grad``). A micro-batch is collated around its
*distinct* prompts: a GRPO group repeats one prompt G times, so the prompt is run once and its keys/values are
copied to its G responses (shared prefix). The forward is then two calls:

    prompts  [U, P]  (left-padded, U distinct)           -> KV cache, logits of the last position
    responses [n, T] (right-padded) on the copied cache  -> logits of response positions

Position t's logits predict response token t: position 0 comes from the prompt's last logits,
positions 1..T-1 from the response pass. This is the same computation as one forward over the
concatenated [n, P + T] sequences (what ``share_prefix=False`` runs, and what happens when every
prompt is distinct), with U·P instead of n·P prompt tokens in the forward and the backward.
Only response positions ever get logits, so vocabulary-sized tensors are [n, T, V].
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from rlvr.core.importance import ISWeights
from rlvr.core.lm_head import Fp32Head, chunked_token_logprobs
from rlvr.core.logprobs import entropy_from_logits, token_logprobs
from rlvr.models.activation_checkpointing import decoder_layers
from rlvr.rollout.base import left_pad
from rlvr.rollout.kv_cache import CACHE_KWARG

if TYPE_CHECKING:
    from rlvr.train.experience import Experience
from rlvr.parallel.runtime import DistContext


@dataclass
class Collated:
    """A padded micro-batch: distinct prompts (left-padded) and one response per row (right-padded)."""

    prompt_ids: torch.Tensor  # [U, P] the distinct prompts
    prompt_mask: torch.Tensor  # [U, P]
    prompt_index: torch.Tensor  # [n] row -> its prompt in prompt_ids
    response_ids: torch.Tensor  # [n, T]
    response_mask: torch.Tensor  # [n, T] bool

    @property
    def response_width(self) -> int:
        return self.response_ids.shape[1]

    @property
    def shares_prompts(self) -> bool:
        return self.prompt_ids.shape[0] < self.response_ids.shape[0]

    def concatenated(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[n, P + T] input ids, attention mask and position ids of the unshared layout."""
        input_ids = torch.cat([self.prompt_ids[self.prompt_index], self.response_ids], dim=1)
        attention_mask = torch.cat([self.prompt_mask[self.prompt_index], self.response_mask.long()], dim=1)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        return input_ids, attention_mask, position_ids


def collate(prompts: list[list[int]], responses: list[list[int]], *, pad_token_id: int) -> Collated:
    """Pad the distinct prompts on the left and the responses on the right."""
    index: dict[tuple[int, ...], int] = {}
    prompt_index = torch.tensor([index.setdefault(tuple(p), len(index)) for p in prompts], dtype=torch.long)
    prompt_ids, prompt_mask = left_pad(list(index), pad_token_id)  # [U, P]
    width_r = max(1, max(len(r) for r in responses))
    response_ids = torch.full((len(responses), width_r), pad_token_id, dtype=torch.long)  # [n, T]
    response_mask = torch.zeros((len(responses), width_r), dtype=torch.bool)
    for row, r in enumerate(responses):
        response_ids[row, : len(r)] = torch.tensor(r, dtype=torch.long)
        response_mask[row, : len(r)] = True
    return Collated(prompt_ids, prompt_mask, prompt_index, response_ids, response_mask)


def response_logits(model, batch: Collated, *, share_prefix: bool = True, in_head=None) -> list[torch.Tensor]:
    """Logits predicting each response token, as pieces to be read in order along T.

    Only the positions needed get logits (``logits_to_keep`` as an index tensor), so the pieces are
    fresh contiguous tensors: no [n, T, V] slice whose backward would allocate the full shape again.

    ``in_head(tokens)``: a context in which the model's LM head turns its hidden states into
    [n, T', 2] (log-prob, entropy) of ``tokens`` (the chunked head); it is used for the passes over
    the responses, inside the model's forward (FSDP2 has the head's weight gathered only there). The
    prompt pass keeps its plain [U, 1, V] logits.

    Returns:
        [first [n, 1, V], rest [n, T - 1, V or 2]] with the shared prefix, or [[n, T, V or 2]] without it.
    """
    device = next(model.parameters()).device
    width = batch.response_width
    tokens = batch.response_ids.to(device)
    head = in_head if in_head is not None else (lambda _tokens: contextlib.nullcontext())
    if not (share_prefix and batch.shares_prompts) or drops_cache(model):
        input_ids, attention_mask, position_ids = (x.to(device) for x in batch.concatenated())
        prompt_width = batch.prompt_ids.shape[1]
        keep = torch.arange(prompt_width - 1, prompt_width + width - 1, device=device)
        with head(tokens):
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        logits_to_keep=keep, use_cache=False)
        return [out.logits]
    prompt_ids, prompt_mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)
    index = batch.prompt_index.to(device)
    cache = DynamicCache(config=getattr(model, "module", model).config)  # DDP wraps the model
    first = model(input_ids=prompt_ids, attention_mask=prompt_mask,
                  position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
                  **{CACHE_KWARG: cache}, use_cache=width > 1, logits_to_keep=1).logits  # [U, 1, V]
    onehot = torch.nn.functional.one_hot(index, num_classes=int(index.max()) + 1)  # [n, U]: row r's prompt
    first = _per_row(onehot, first)  # [n, 1, V]: each response's first-token logits
    if width == 1:
        return [first]
    cache = _response_cache(cache, onehot)  # every row gets its prompt's keys/values, read-only
    attention_mask = torch.cat([prompt_mask[index], batch.response_mask.to(device).long()], dim=1)
    position_ids = prompt_mask.sum(-1)[index, None] + torch.arange(width, device=device)  # [n, T]
    with head(tokens[:, 1:]):
        rest = model(input_ids=tokens, attention_mask=attention_mask,
                     position_ids=position_ids, **{CACHE_KWARG: cache}, use_cache=True,
                     logits_to_keep=torch.arange(width - 1, device=device)).logits  # [n, T - 1, V]
    return [first, rest]


def drops_cache(model) -> bool:
    """Whether the model's layers would drop the prompts' KV cache: transformers' own gradient checkpointing
    (``gradient_checkpointing_enable``, TRL's default) in training mode with gradients on sets the cache to
    None inside each layer, so the shared prefix would reach no layer. rlvr's own checkpointing
    (``rlvr.models.activation_checkpointing``) keeps it; a model prepared elsewhere is scored unshared."""
    if not (model.training and torch.is_grad_enabled()):
        return False
    return any(getattr(layer, "gradient_checkpointing", False) for layer in decoder_layers(model))


def _per_row(onehot: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values[index]`` as a product with the one-hot [n, U] matrix: the same numbers (x·1 + 0·y = x), and a
    backward that is a GEMM. Plain indexing's backward adds the G rows' gradients of a prompt with
    index_put(accumulate=True), whose summation order varies with CPU load: a resumed run differed from an
    uninterrupted one by ~4e-9, and two runs of the same command parted at step 1's gradients
    (tools/first_difference.py; docs/design/pitfalls.md #7)."""
    return torch.tensordot(onehot.to(values.dtype), values, dims=([1], [0]))


def _response_cache(cache, onehot: torch.Tensor):
    """The cache of the response pass: row r holds its prompt's keys/values, and every layer only reads it.

    Rows get their prompt's keys by :func:`_per_row` (a product with the one-hot [n, U] matrix).

    Both caches become read-only, so a layer run twice (activation checkpointing's recompute in the
    backward) sees what it saw the first time: the prompt pass's layers get back the keys they pass
    in (as on their first call, with nothing cached before), the response pass's layers the prompt
    prefix followed by theirs (the tensors DynamicLayer's concatenation gives), and nothing is stored.
    """
    rows = copy.copy(cache)
    rows.layers = []
    for layer in cache.layers:
        row_layer = copy.copy(layer)
        row_layer.keys = _per_row(onehot, layer.keys)
        row_layer.values = _per_row(onehot, layer.values)
        row_layer.update = _prefixed(row_layer.keys, row_layer.values)
        layer.update = lambda keys, values, *args, **kwargs: (keys, values)
        rows.layers.append(row_layer)
    return rows


def _prefixed(prefix_keys: torch.Tensor, prefix_values: torch.Tensor):
    def update(keys, values, *args, **kwargs):
        return torch.cat([prefix_keys, keys], dim=-2), torch.cat([prefix_values, values], dim=-2)

    return update


def response_logprobs(
    model,
    batch: Collated,
    *,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    share_prefix: bool = True,
    head_chunk: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of the response tokens (and, optionally, the policy's entropy there).

    Args:
        model: a causal LM accepting ``logits_to_keep`` and a ``cache``.
        batch: from :func:`collate`.
        temperature: logits are divided by it (the sampling temperature).
        with_entropy: also return the per-token entropy (computed without grad unless ``entropy_grad``).
        entropy_grad: the entropy keeps its gradient (an entropy bonus in the loss).
        share_prefix: run each distinct prompt once (see the module docstring).
        head_chunk: > 0: the LM head runs on ``head_chunk`` tokens at a time from the last hidden
            states (``rlvr.core.lm_head``), so no [n, T, V] logits exist; 0: plain logits.

    Returns:
        (logprobs [n, T] fp32, entropy [n, T] or None); padded positions hold junk that the
        response mask removes.
    """
    device = next(model.parameters()).device
    tokens = batch.response_ids.to(device)
    logprobs, entropy, offset = [], [], 0
    in_head = None
    if head_chunk > 0:
        head = lm_head(model)
        in_head = lambda span: _chunked_head(head, span, temperature=temperature, chunk=head_chunk,
                                             with_entropy=with_entropy, entropy_grad=entropy_grad)
    for piece in response_logits(model, batch, share_prefix=share_prefix, in_head=in_head):
        span = tokens[:, offset : offset + piece.shape[1]]
        offset += piece.shape[1]
        if in_head is not None and piece.shape[-1] == 2:  # the chunked head's (log-prob, entropy)
            logprobs.append(piece[..., 0])
            entropy.append(piece[..., 1] if entropy_grad else piece[..., 1].detach())
            continue
        lp, lse = token_logprobs(piece, span, temperature=temperature, return_logsumexp=True)
        logprobs.append(lp)
        if with_entropy and entropy_grad:
            entropy.append(entropy_from_logits(piece, temperature=temperature))
        elif with_entropy:
            with torch.no_grad():
                entropy.append(entropy_from_logits(piece.detach(), temperature=temperature, logsumexp=lse.detach()))
    return torch.cat(logprobs, dim=1), (torch.cat(entropy, dim=1) if with_entropy else None)


def lm_head(model) -> torch.nn.Linear:
    """The output projection of a causal LM (through DDP, PEFT and the LoRA reference wrapper).

    Refused, with the fix, where the chunked head would not be the model's own computation.
    """
    inner = getattr(model, "module", model)  # DDP
    head = inner.get_output_embeddings()
    config = getattr(inner, "config", None)
    if type(head) not in (torch.nn.Linear, Fp32Head):
        raise ValueError(f"lm_head_chunk_tokens needs a plain nn.Linear LM head, this model has "
                         f"{type(head).__name__} (e.g. LoRA on lm_head); set lm_head_chunk_tokens=0")
    if getattr(config, "final_logit_softcapping", None):
        raise ValueError("lm_head_chunk_tokens does not apply logit soft-capping (this model uses "
                         "final_logit_softcapping); set lm_head_chunk_tokens=0")
    return head


@contextlib.contextmanager
def _chunked_head(head: torch.nn.Linear, tokens: torch.Tensor, *, temperature: float, chunk: int,
                  with_entropy: bool, entropy_grad: bool = False):
    """Inside, ``head(h)`` returns [n, T', 2]: the log-prob of ``tokens`` (with grad) and the entropy
    (zeros unless ``with_entropy``; with grad only with ``entropy_grad``)."""
    fp32 = isinstance(head, Fp32Head)  # cast_lm_head_to_fp32: the product in float32, autocast off

    def forward(hidden):
        with torch.autocast(hidden.device.type, enabled=not fp32) if fp32 else contextlib.nullcontext():
            lp, ent = chunked_token_logprobs(hidden.float() if fp32 else hidden, head.weight, tokens, bias=head.bias,
                                             temperature=temperature, chunk_tokens=chunk, with_entropy=with_entropy)
        # detached unless a loss uses it: the backward then gets no entropy gradient to add
        return torch.stack([lp, ent if entropy_grad else ent.detach()], dim=-1)

    head.forward = forward
    try:
        yield
    finally:
        del head.forward


@torch.no_grad()
def response_logprobs_no_grad(
    model,
    prompts: list[list[int]],
    responses: list[list[int]],
    *,
    pad_token_id: int,
    temperature: float,
    micro_batch_size: int,
    head_chunk: int = 0,
    max_tokens: int | None = None,
) -> list[torch.Tensor]:
    """Log-probs for many sequences in micro-batches of similar length; one 1-D tensor per response."""
    was_training = model.training
    model.eval()
    try:
        result: list[torch.Tensor | None] = [None] * len(responses)
        everything = list(range(len(responses)))
        for rows in length_buckets(everything, [len(r) for r in responses], micro_batch_size, max_tokens=max_tokens):
            batch = collate([prompts[i] for i in rows], [responses[i] for i in rows], pad_token_id=pad_token_id)
            logprobs, _ = response_logprobs(model, batch, temperature=temperature, head_chunk=head_chunk)
            for row, i in enumerate(rows):
                result[i] = logprobs[row, : len(responses[i])].cpu()
        return result
    finally:
        model.train(was_training)


def minibatches(group_ids: torch.Tensor, num_minibatches: int) -> list[list[int]]:
    """Split response indices into ``num_minibatches`` runs of whole groups (never a split group).

    Pass pool ids to keep TA-GRPO pools whole.

    Groups are dealt in order of first appearance; the split balances the number of groups.
    """
    order: list[int] = []
    members: dict[int, list[int]] = {}
    for index, gid in enumerate(group_ids.tolist()):
        if gid not in members:
            members[gid] = []
            order.append(gid)
        members[gid].append(index)
    count = max(1, min(num_minibatches, len(order)))
    bounds = [round(i * len(order) / count) for i in range(count + 1)]
    return [
        [index for gid in order[bounds[i] : bounds[i + 1]] for index in members[gid]]
        for i in range(count)
    ]


def length_buckets(rows: list[int], lengths: list[int], max_rows: int, *, max_tokens: int | None = None) -> list[list[int]]:
    """Cut ``rows`` into micro-batches of at most ``max_rows`` rows of similar response length.

    A micro-batch is padded to its longest response, so mixing 20- and 256-token responses makes
    the forward and backward process mostly padding (measured: 42 % of the positions at
    max_completion_length 256, docs/performance.md). Rows sorted longest first are cut when a
    chunk is full or the next row is shorter than half the chunk's longest, so at most half of a
    chunk's response positions are padding. Exact: the loss of a micro-batch is divided by the
    mini-batch's global token/sequence counts, so any grouping gives the same loss and gradient.

    With ``max_tokens`` (verl's ``ppo_max_token_len_per_gpu``, counted in padded response tokens)
    a chunk is also cut before its rows × longest would exceed the budget; a single response longer
    than the budget is a micro-batch of its own.

    Args:
        rows: response indices (``lengths[i]`` is the length of response ``rows[i]``).
        max_rows: the micro-batch size.
        max_tokens: padded response tokens per micro-batch at most (None: no budget).
    """
    order = sorted(range(len(rows)), key=lambda i: -lengths[i])  # stable: ties keep their order
    chunks: list[list[int]] = []
    longest = 0
    budget = max_tokens if max_tokens is not None else float("inf")
    for i in order:
        full = chunks and (len(chunks[-1]) >= max_rows or (len(chunks[-1]) + 1) * longest > budget)
        if not chunks or full or 2 * lengths[i] < longest:
            chunks.append([])
            longest = lengths[i]
        chunks[-1].append(rows[i])
    return chunks


def pad_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors into [n, width], zero-padded on the right."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out


@dataclass
class LossInputs:
    """One micro-batch's inputs to the loss, on the device ([n, T] per token, [n] per response)."""

    logprobs: torch.Tensor  # log π_θ (with grad)
    entropy: torch.Tensor  # H(π_θ) per position (with grad when entropy_coef > 0)
    old: torch.Tensor  # log π_old (logprobs.detach() when not computed)
    ref: torch.Tensor | None  # log π_ref (None: β = 0)
    advantages: torch.Tensor  # [n]
    mask: torch.Tensor  # the tokens trained on
    is_anchor: torch.Tensor | None  # [n] (None: no anchor in the micro-batch, and no anchor term)
    is_weights: torch.Tensor | None  # the IS correction's w_t (anchors 1; None: off)
    keep: torch.Tensor | None  # [n, T] or [n, 1] the policy term's tokens kept (TRL's off-policy and entropy masks)
    bonus_mask: torch.Tensor  # the tokens of the entropy bonus (TRL: the mask and top_entropy_quantile's)
    correction: ISWeights | None  # the IS correction's weights and statistics (None: off)
    sampled: torch.Tensor | None  # the sampler's log-probs (on the on-policy pass, or with the correction)
    shown: torch.Tensor  # every response token, anchors excluded
    on_own_prompt: torch.Tensor  # [n, 1] scored on the prompt it was sampled from


def is_numerator(batch: OptimizerBatch, rows: list[int], old: torch.Tensor) -> torch.Tensor:
    """[n, T] log π_old of ``rows`` on the prompt each was sampled from: ``old`` (the old log-probs, or
    ``logprobs.detach()`` on the single on-policy pass), except where ``batch.sampled_old`` has a row."""
    if batch.sampled_old is None or all(batch.sampled_old[i] is None for i in rows):
        return old
    own = torch.tensor([batch.sampled_old[i] is None for i in rows], device=old.device).unsqueeze(-1)
    other = pad_rows([batch.sampled_old[i] if batch.sampled_old[i] is not None else torch.zeros(0) for i in rows],
                     old.shape[1]).to(old.device)
    return torch.where(own, old, other)


@dataclass
class OptimizerBatch:
    """One mini-batch's inputs: the experience, its advantages and old/reference log-probs, the rank shares."""

    exp: Experience
    advantages: torch.Tensor  # [N]
    old: list[torch.Tensor | None] | None  # N × [T_i] (None: old = logp.detach())
    ref: list[torch.Tensor | None] | None  # N × [T_i] (None: β = 0)
    shares: list[list[int]]  # rank r -> its responses of this mini-batch
    # IS correction: N × [T_i] log π_old on the prompt a response was sampled from, where ``old`` is scored on
    # another (TA-GRPO); None where ``old`` serves (None: for all)
    sampled_old: list[torch.Tensor | None] | None = None


def rank_share(pool_ids: torch.Tensor, mini: list[int], ctx: DistContext, rank: int) -> list[int]:
    """The responses of ``mini`` that ``rank`` trains on: a contiguous share of its pools (never split)."""
    if not ctx.enabled:
        return mini
    order: dict[int, list[int]] = {}
    for i in mini:
        order.setdefault(int(pool_ids[i]), []).append(i)
    pools = list(order.values())
    return [i for p in ctx.share(len(pools), rank) for i in pools[p]]
