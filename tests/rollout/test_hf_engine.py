"""HF engine: EOS cut, truncation flag, sampling log-probs equal the trainer's."""

import torch

from rlvr.models import eos_token_ids, tiny_random_model_and_tokenizer
from rlvr.rollout import HFEngine
from rlvr.train.scoring import score_no_grad


def _engine(seed=0):
    model, tok = tiny_random_model_and_tokenizer(seed=seed)
    return HFEngine(model, pad_token_id=tok.pad_token_id, eos_token_ids=eos_token_ids(model, tok)), model, tok


def test_generate_shapes_and_flags():
    engine, _model, _tok = _engine()
    prompts = [[1, 2, 3], [4, 5], [6]]
    out = engine.generate(prompts, max_new_tokens=12, temperature=1.0, generator_seed=0)
    assert len(out) == 3
    for c in out:
        assert 1 <= len(c.token_ids) <= 12
        assert len(c.logprobs) == len(c.token_ids)
        ends_with_eos = c.token_ids[-1] in engine.eos_token_ids
        assert c.truncated == (not ends_with_eos)
        assert not any(t in engine.eos_token_ids for t in c.token_ids[:-1])
        if c.truncated:
            assert len(c.token_ids) == 12


def test_seeded_generation_is_reproducible():
    engine, _, _ = _engine()
    a = engine.generate([[1, 2, 3]] * 4, max_new_tokens=8, temperature=1.0, generator_seed=5)
    b = engine.generate([[1, 2, 3]] * 4, max_new_tokens=8, temperature=1.0, generator_seed=5)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_sampling_logprobs_match_trainer_scoring():
    # Same temperature convention in sampler and trainer: the mismatch is only float noise.
    engine, model, tok = _engine(seed=1)
    prompts = [[7, 8, 9, 10], [11, 12]] * 2
    for temperature in (1.0, 0.6):
        out = engine.generate(prompts, max_new_tokens=10, temperature=temperature, generator_seed=2)
        scored = score_no_grad(model, prompts, [c.token_ids for c in out], pad_token_id=tok.pad_token_id,
                               temperature=temperature, micro_batch_size=4)
        for c, lp in zip(out, scored):
            torch.testing.assert_close(torch.tensor(c.logprobs), lp, rtol=1e-4, atol=1e-4)


def test_greedy_is_deterministic_without_seed():
    engine, _, _ = _engine()
    a = engine.generate([[1, 2]], max_new_tokens=6, temperature=0.0)
    b = engine.generate([[1, 2]], max_new_tokens=6, temperature=0.0)
    assert a[0].token_ids == b[0].token_ids
