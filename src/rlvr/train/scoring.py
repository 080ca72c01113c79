"""Score (prompt, response) token sequences under a model: per-token log-probs and entropy.

A micro-batch is collated around its *distinct* prompts: a GRPO group repeats one prompt G times,
so the prompt is run once and its keys/values are copied to its G responses (shared prefix). The
forward is then two calls:

    prompts  [U, P]  (left-padded, U distinct)           -> KV cache, logits of the last position
    responses [n, T] (right-padded) on the copied cache  -> logits of response positions

Position t's logits predict response token t: position 0 comes from the prompt's last logits,
positions 1..T-1 from the response pass. This is the same computation as one forward over the
concatenated [n, P + T] sequences (what ``share_prefix=False`` runs, and what happens when every
prompt is distinct), with U·P instead of n·P prompt tokens in the forward and the backward.
Only response positions ever get logits, so vocabulary-sized tensors are [n, T, V].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rlvr.core.logprobs import entropy_from_logits, token_logprobs
from rlvr.rollout.base import left_pad
from rlvr.rollout.kv_cache import CACHE_KWARG
from rlvr.train.experience import length_buckets


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


def response_logits(model, batch: Collated, *, share_prefix: bool = True) -> list[torch.Tensor]:
    """Logits predicting each response token, as pieces to be read in order along T.

    Only the positions needed get logits (``logits_to_keep`` as an index tensor), so the pieces are
    fresh contiguous tensors: no [n, T, V] slice whose backward would allocate the full shape again.

    Returns:
        [first [n, 1, V], rest [n, T - 1, V]] with the shared prefix, or [[n, T, V]] without it.
    """
    device = next(model.parameters()).device
    width = batch.response_width
    if not (share_prefix and batch.shares_prompts):
        input_ids, attention_mask, position_ids = (x.to(device) for x in batch.concatenated())
        prompt_width = batch.prompt_ids.shape[1]
        keep = torch.arange(prompt_width - 1, prompt_width + width - 1, device=device)
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    logits_to_keep=keep, use_cache=False)
        return [out.logits]
    prompt_ids, prompt_mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)
    index = batch.prompt_index.to(device)
    cache = DynamicCache(config=getattr(model, "module", model).config)  # DDP wraps the model
    first = model(input_ids=prompt_ids, attention_mask=prompt_mask,
                  position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
                  **{CACHE_KWARG: cache}, use_cache=width > 1, logits_to_keep=1).logits  # [U, 1, V]
    if width == 1:
        return [first[index]]
    _copy_prompts_to_rows(cache, index, first.dtype)  # every row gets its prompt's keys/values
    attention_mask = torch.cat([prompt_mask[index], batch.response_mask.to(device).long()], dim=1)
    position_ids = prompt_mask.sum(-1)[index, None] + torch.arange(width, device=device)  # [n, T]
    rest = model(input_ids=batch.response_ids.to(device), attention_mask=attention_mask,
                 position_ids=position_ids, **{CACHE_KWARG: cache}, use_cache=True,
                 logits_to_keep=torch.arange(width - 1, device=device)).logits  # [n, T - 1, V]
    return [first[index], rest]


def _copy_prompts_to_rows(cache, index: torch.Tensor, dtype: torch.dtype) -> None:
    """keys[u] -> rows of prompt u, as a product with a one-hot [n, U] matrix.

    Plain indexing would do the same forward, but its backward accumulates the G rows' gradients
    with index_put(accumulate=True), whose summation order varied under CPU load (a resumed run
    then differed from an uninterrupted one by ~4e-9); the matrix product's backward is a GEMM.
    """
    onehot = torch.nn.functional.one_hot(index, num_classes=int(index.max()) + 1).to(dtype)  # [n, U]
    for layer in cache.layers:
        layer.keys = torch.tensordot(onehot.to(layer.keys.dtype), layer.keys, dims=([1], [0]))
        layer.values = torch.tensordot(onehot.to(layer.values.dtype), layer.values, dims=([1], [0]))


def score(
    model,
    batch: Collated,
    *,
    temperature: float,
    with_entropy: bool = False,
    share_prefix: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of the response tokens (and, optionally, the policy's entropy there).

    Args:
        model: a causal LM accepting ``logits_to_keep`` and a ``cache``.
        batch: from :func:`collate`.
        temperature: logits are divided by it (the sampling temperature).
        with_entropy: also return the per-token entropy (computed without grad).
        share_prefix: run each distinct prompt once (see the module docstring).

    Returns:
        (logprobs [n, T] fp32, entropy [n, T] or None); padded positions hold junk that the
        response mask removes.
    """
    device = next(model.parameters()).device
    tokens = batch.response_ids.to(device)
    logprobs, entropy, offset = [], [], 0
    for logits in response_logits(model, batch, share_prefix=share_prefix):
        span = tokens[:, offset : offset + logits.shape[1]]
        offset += logits.shape[1]
        lp, lse = token_logprobs(logits, span, temperature=temperature, return_logsumexp=True)
        logprobs.append(lp)
        if with_entropy:
            with torch.no_grad():
                entropy.append(entropy_from_logits(logits.detach(), temperature=temperature, logsumexp=lse.detach()))
    return torch.cat(logprobs, dim=1), (torch.cat(entropy, dim=1) if with_entropy else None)


@torch.no_grad()
def score_no_grad(
    model,
    prompts: list[list[int]],
    responses: list[list[int]],
    *,
    pad_token_id: int,
    temperature: float,
    micro_batch_size: int,
) -> list[torch.Tensor]:
    """Log-probs for many sequences in micro-batches of similar length; one 1-D tensor per response."""
    was_training = model.training
    model.eval()
    try:
        result: list[torch.Tensor | None] = [None] * len(responses)
        everything = list(range(len(responses)))
        for rows in length_buckets(everything, [len(r) for r in responses], micro_batch_size):
            batch = collate([prompts[i] for i in rows], [responses[i] for i in rows], pad_token_id=pad_token_id)
            logprobs, _ = score(model, batch, temperature=temperature)
            for row, i in enumerate(rows):
                result[i] = logprobs[row, : len(responses[i])].cpu()
        return result
    finally:
        model.train(was_training)
