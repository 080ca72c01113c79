"""What the engines that sample from the training model itself share: arguments, chunking, seeding."""

from __future__ import annotations

import torch

from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids [n, P], attention mask [n, P]), padded on the left to the longest."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, tokens in enumerate(prompts):
        ids[row, width - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
        mask[row, width - len(tokens) :] = 1
    return ids, mask


class LocalEngine:
    """Base of the engines that run the training model in this process (no weights to sync).

    Args:
        model: a transformers causal LM (or PEFT wrapper).
        pad_token_id: id used for left padding.
        eos_token_ids: ids that end a response.
        max_batch_size: at most this many sequences per chunk (bounds KV-cache memory).
    """

    # abilities (rlvr.rollout.engine.RolloutEngine): it samples from the training model itself
    keeps_own_weights = False
    supports_async_generation = False  # the update moves the very weights it samples from
    is_correction_by_default = False  # π_sampler = π_old up to float noise: no correction unless asked
    supports_sleep = False
    optional_package = None

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
        sampling: Sampling,
        generator_seed: int | None = None,
        row_seeds: list[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (repeat a prompt G times for a group).

        Args:
            prompts: N token-id lists.
            max_new_tokens: the response budget.
            sampling: temperature (0: greedy), top_p, top_k, min_p, repetition_penalty; the
                log-probs returned are log softmax(logits / T) of the drawn tokens whatever the warps
                (rlvr.rollout.sampling).
            generator_seed: if given, torch's global RNG is seeded with it first.
            row_seeds: N seeds; row r then samples with its own ``torch.Generator`` (engines that
                support it).

        Returns:
            N completions in prompt order.
        """
        if row_seeds is not None and len(row_seeds) != len(prompts):
            raise ValueError(f"row_seeds has {len(row_seeds)} seeds for {len(prompts)} prompts")
        if generator_seed is not None:
            torch.manual_seed(generator_seed)
        was_training = self.model.training
        self.model.eval()
        try:
            out: list[Completion] = []
            for start in range(0, len(prompts), self.max_batch_size):
                stop = start + self.max_batch_size
                seeds = row_seeds[start:stop] if row_seeds is not None else None
                out.extend(self._generate_chunk(prompts[start:stop], max_new_tokens, sampling, seeds))
            return out
        finally:
            self.model.train(was_training)

    def _generate_chunk(self, prompts, max_new_tokens, sampling: Sampling, row_seeds) -> list[Completion]:
        raise NotImplementedError
