"""Rollout engine on transformers ``generate``: it generates, it does not score.

Prompts arrive as token-id lists (already chat-formatted), are left-padded into one batch, and
sampled with temperature/top_p. Each completion is cut after its first EOS (the EOS token is kept:
the policy must learn to stop). A completion that reaches ``max_new_tokens`` without EOS is
flagged ``truncated``.

The sampling log-probs returned are log softmax(logits / T) of the chosen tokens — the same
convention as the trainer's (top_p is not renormalised), so their difference from the trainer's
log-probs measures the training/inference mismatch (USERS.md #5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from rlvr.core.logprobs import token_logprobs


@dataclass(frozen=True)
class Completion:
    """One sampled response."""

    token_ids: list[int]
    logprobs: list[float]  # sampling log-probs, one per token (empty for off-policy anchors)
    truncated: bool
    is_anchor: bool = False  # an expert solution injected by DaGRPO, not sampled from the policy


class HFEngine:
    """Batched sampling with ``model.generate``.

    Args:
        model: a transformers causal LM (or PEFT wrapper).
        pad_token_id: id used for left padding.
        eos_token_ids: ids that end a response.
        max_batch_size: at most this many sequences per ``generate`` call (bounds KV-cache memory).
    """

    def __init__(self, model, *, pad_token_id: int, eos_token_ids: list[int], max_batch_size: int = 64):
        if not eos_token_ids:
            raise ValueError("the rollout engine needs at least one EOS token id")
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = list(eos_token_ids)
        self.max_batch_size = max_batch_size

    def sync_weights(self) -> None:
        """Nothing to do: this engine samples from the training model itself."""

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        generator_seed: int | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (repeat a prompt G times for a group).

        Args:
            prompts: N token-id lists.
            max_new_tokens: the response budget.
            temperature: > 0 samples; 0 decodes greedily.
            top_p: nucleus p.
            generator_seed: if given, torch's global RNG is seeded with it first.

        Returns:
            N completions in prompt order.
        """
        if generator_seed is not None:
            torch.manual_seed(generator_seed)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch_size):
            chunk = prompts[start : start + self.max_batch_size]
            out.extend(self._generate_chunk(chunk, max_new_tokens, temperature, top_p))
        return out

    def _generate_chunk(self, prompts, max_new_tokens, temperature, top_p) -> list[Completion]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # [n, P]
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        was_training = self.model.training
        self.model.eval()
        try:
            result = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=self._generation_config(max_new_tokens, temperature, top_p),
            )
        finally:
            self.model.train(was_training)
        new_tokens = result.sequences[:, width:].cpu()  # [n, T']
        logits = torch.stack(result.logits, dim=1)  # [n, T', V]
        logprobs = token_logprobs(logits, new_tokens.to(logits.device), temperature=temperature or 1.0).cpu()
        return [self._cut(new_tokens[row], logprobs[row], max_new_tokens) for row in range(len(prompts))]

    def _generation_config(self, max_new_tokens: int, temperature: float, top_p: float) -> GenerationConfig:
        # A fresh config: the model's own generation_config may carry top_k, repetition penalties or
        # a temperature that would make the sampler differ from the distribution we train on.
        sampling = temperature > 0
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sampling,
            temperature=temperature if sampling else 1.0,
            top_p=top_p if sampling else 1.0,
            top_k=0,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )

    def _cut(self, tokens: torch.Tensor, logprobs: torch.Tensor, max_new_tokens: int) -> Completion:
        ids = tokens.tolist()
        for pos, tok in enumerate(ids):
            if tok in self.eos_token_ids:
                return Completion(ids[: pos + 1], logprobs[: pos + 1].tolist(), truncated=False)
        # No EOS: generation stopped at the budget (tokens beyond are absent, never padding).
        return Completion(ids, logprobs.tolist(), truncated=len(ids) >= max_new_tokens)
