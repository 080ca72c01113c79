"""Score (prompt, response) token sequences under a model: per-token log-probs and entropy.

Each micro-batch is collated to its own widths: prompts left-padded, responses right-padded,
position ids from the attention mask (so they match what ``generate`` used for left-padded
prompts). Only the logits of response positions are materialised (``logits_to_keep``), so the
cost in vocabulary-sized tensors is [n, T_resp, V], never [n, P + T, V].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.core.logprobs import entropy_from_logits, token_logprobs


@dataclass
class Collated:
    """A padded micro-batch of prompt+response sequences."""

    input_ids: torch.Tensor  # [n, P + T]
    attention_mask: torch.Tensor  # [n, P + T]
    position_ids: torch.Tensor  # [n, P + T]
    response_ids: torch.Tensor  # [n, T]
    response_mask: torch.Tensor  # [n, T] bool

    @property
    def response_width(self) -> int:
        return self.response_ids.shape[1]


def collate(prompts: list[list[int]], responses: list[list[int]], *, pad_token_id: int) -> Collated:
    """Pad prompts on the left and responses on the right into one batch."""
    n = len(prompts)
    width_p = max(len(p) for p in prompts)
    width_r = max(1, max(len(r) for r in responses))
    input_ids = torch.full((n, width_p + width_r), pad_token_id, dtype=torch.long)  # [n, P + T]
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros((n, width_r), dtype=torch.bool)  # [n, T]
    for row, (p, r) in enumerate(zip(prompts, responses)):
        input_ids[row, width_p - len(p) : width_p] = torch.tensor(p, dtype=torch.long)
        input_ids[row, width_p : width_p + len(r)] = torch.tensor(r, dtype=torch.long)
        attention_mask[row, width_p - len(p) : width_p + len(r)] = 1
        response_mask[row, : len(r)] = True
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [n, P + T]
    return Collated(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_ids=input_ids[:, width_p:],
        response_mask=response_mask,
    )


def score(
    model,
    batch: Collated,
    *,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of the response tokens (and, optionally, the policy's entropy there).

    Args:
        model: a causal LM accepting ``logits_to_keep``.
        batch: from :func:`collate`.
        temperature: logits are divided by it (the sampling temperature).
        with_entropy: also return the per-token entropy (computed without grad).

    Returns:
        (logprobs [n, T] fp32, entropy [n, T] or None); padded positions hold junk that the
        response mask removes.
    """
    device = next(model.parameters()).device
    width_r = batch.response_width
    out = model(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention_mask.to(device),
        position_ids=batch.position_ids.to(device),
        logits_to_keep=width_r + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]  # [n, T, V]: position t predicts response token t
    logprobs = token_logprobs(logits, batch.response_ids.to(device), temperature=temperature)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach(), temperature=temperature)
    return logprobs, entropy


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
    """Log-probs for many sequences in micro-batches; one 1-D tensor per response."""
    was_training = model.training
    model.eval()
    try:
        result: list[torch.Tensor] = []
        for start in range(0, len(prompts), micro_batch_size):
            batch = collate(
                prompts[start : start + micro_batch_size],
                responses[start : start + micro_batch_size],
                pad_token_id=pad_token_id,
            )
            logprobs, _ = score(model, batch, temperature=temperature)
            for row, r in enumerate(responses[start : start + micro_batch_size]):
                result.append(logprobs[row, : len(r)].cpu())
        return result
    finally:
        model.train(was_training)
