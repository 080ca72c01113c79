"""Rollout engine on transformers ``generate``: it generates, it does not score.

Prompts arrive as token-id lists (already chat-formatted), are left-padded into one batch, and
sampled with the run's :class:`~rlvr.rollout.sampling.Sampling` (temperature, top_p, top_k, min_p,
repetition_penalty: ``GenerationConfig``'s own names). Each completion is cut after its first EOS
(the EOS token is kept: the policy must learn to stop). A completion that reaches ``max_new_tokens`` without EOS is
flagged ``truncated``.

The sampling log-probs returned are log softmax(logits / T) of the chosen tokens — the same
convention as the trainer's (top_p, top_k, min_p and the repetition penalty choose the token; the
log-prob is not renormalised over what they keep), so their difference from the trainer's
log-probs measures the training/inference mismatch (docs/design/pitfalls.md #5).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from rlvr.core.logprobs import token_logprobs
from rlvr.rollout.base import LocalEngine, left_pad
from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling


class HFEngine(LocalEngine):
    """Batched sampling with ``model.generate`` (the reference engine; no ``row_seeds``)."""

    supports_row_seeds = False  # generate(row_seeds=...): a request's draws do not depend on its batch

    def _generate_chunk(self, prompts, max_new_tokens, sampling: Sampling, row_seeds) -> list[Completion]:
        if row_seeds is not None:
            raise ValueError("the hf engine has no row_seeds: use rollout_engine=rlvr")
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompts, self.pad_token_id)  # [n, P]
        width = input_ids.shape[1]
        result = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=self._generation_config(max_new_tokens, sampling),
        )
        new_tokens = result.sequences[:, width:].cpu()  # [n, T']
        logits = torch.stack(result.logits, dim=1)  # [n, T', V]
        logprobs = token_logprobs(logits, new_tokens.to(logits.device), temperature=sampling.temperature or 1.0).cpu()
        return [self._cut(new_tokens[row], logprobs[row], max_new_tokens) for row in range(len(prompts))]

    def _generation_config(self, max_new_tokens: int, sampling: Sampling) -> GenerationConfig:
        # A fresh config: the model's own generation_config may carry top_k, repetition penalties or
        # a temperature that would make the sampler differ from the one the run asked for.
        sampled = not sampling.greedy
        return GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sampled,
            temperature=sampling.temperature if sampled else 1.0,
            top_p=sampling.top_p if sampled else 1.0,
            top_k=sampling.top_k if sampled else 0,
            min_p=sampling.min_p if sampled else None,
            repetition_penalty=float(sampling.repetition_penalty),  # applies to greedy decoding too
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
