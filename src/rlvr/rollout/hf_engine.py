"""Rollout engine on transformers ``generate``: it generates, it does not score.

Prompts arrive as token-id lists (already chat-formatted), are left-padded into one batch, and
sampled with temperature/top_p. Each completion is cut after its first EOS (the EOS token is kept:
the policy must learn to stop). A completion that reaches ``max_new_tokens`` without EOS is
flagged ``truncated``.

The sampling log-probs returned are log softmax(logits / T) of the chosen tokens — the same
convention as the trainer's (top_p is not renormalised), so their difference from the trainer's
log-probs measures the training/inference mismatch (docs/design/pitfalls.md #5).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from rlvr.core.logprobs import token_logprobs
from rlvr.rollout.base import LocalEngine, left_pad
from rlvr.rollout.completion import Completion


class HFEngine(LocalEngine):
    """Batched sampling with ``model.generate`` (the reference engine; no ``row_seeds``)."""

    supports_row_seeds = False  # generate(row_seeds=...): a request's draws do not depend on its batch

    def _generate_chunk(self, prompts, max_new_tokens, temperature, top_p, row_seeds) -> list[Completion]:
        if row_seeds is not None:
            raise ValueError("the hf engine has no row_seeds: use rollout_engine=rlvr")
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompts, self.pad_token_id)  # [n, P]
        width = input_ids.shape[1]
        result = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=self._generation_config(max_new_tokens, temperature, top_p),
        )
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
