"""Scoring: padded micro-batches give the same log-probs as each sequence alone."""

import torch

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.train.scoring import collate, score, score_no_grad


def _reference_logprobs(model, prompt, response, temperature):
    # Independent computation: one unpadded sequence, full logits, log_softmax.
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0] / temperature  # [L, V]
    logp = torch.log_softmax(logits.float(), -1)
    positions = range(len(prompt) - 1, len(prompt) + len(response) - 1)
    return torch.stack([logp[p, ids[0, p + 1]] for p in positions])


def test_collate_layout():
    batch = collate([[5, 6, 7], [8]], [[1, 2], [3, 4, 9]], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 1, 2, 0], [0, 0, 8, 3, 4, 9]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert batch.response_mask.tolist() == [[True, True, False], [True, True, True]]


def test_padded_batch_matches_single_sequences():
    model, _ = tiny_random_model_and_tokenizer(seed=3)
    prompts = [[10, 11, 12, 13, 14], [20, 21], [30, 31, 32]]
    responses = [[40, 41], [50, 51, 52, 53], [60]]
    for temperature in (1.0, 0.7):
        got = score_no_grad(model, prompts, responses, pad_token_id=0, temperature=temperature, micro_batch_size=2)
        for p, r, lp in zip(prompts, responses, got):
            torch.testing.assert_close(lp, _reference_logprobs(model, p, r, temperature), rtol=1e-5, atol=1e-5)


def test_score_entropy_shape_and_grad():
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    batch = collate([[1, 2, 3]], [[4, 5]], pad_token_id=0)
    logprobs, entropy = score(model, batch, temperature=1.0, with_entropy=True)
    assert logprobs.shape == entropy.shape == (1, 2)
    assert logprobs.requires_grad and not entropy.requires_grad
    assert (entropy > 0).all()
