"""HF engine: EOS cut, truncation flag, sampling log-probs equal the trainer's."""

import torch

from rlvr.models import eos_token_ids, tiny_random_model_and_tokenizer
from rlvr.rollout import GREEDY, HFEngine, Sampling
from rlvr.train.batching import response_logprobs_no_grad


def _engine(seed=0):
    model, tok = tiny_random_model_and_tokenizer(seed=seed)
    return HFEngine(model, pad_token_id=tok.pad_token_id, eos_token_ids=eos_token_ids(model, tok)), model, tok


def test_generate_shapes_and_flags():
    engine, _model, _tok = _engine()
    prompts = [[1, 2, 3], [4, 5], [6]]
    out = engine.generate(prompts, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=0)
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
    a = engine.generate([[1, 2, 3]] * 4, max_new_tokens=8, sampling=Sampling(1.0), generator_seed=5)
    b = engine.generate([[1, 2, 3]] * 4, max_new_tokens=8, sampling=Sampling(1.0), generator_seed=5)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_sampling_logprobs_match_trainer_scoring():
    # Same temperature convention in sampler and trainer: the mismatch is only float noise.
    engine, model, tok = _engine(seed=1)
    prompts = [[7, 8, 9, 10], [11, 12]] * 2
    # the warps choose the token, the log-prob stays log softmax(logits / T): top_k = 10 keeps little of
    # the tiny model's near-uniform mass, so a renormalised log-prob would be far off
    warped = Sampling(0.6, top_k=10, min_p=0.05, repetition_penalty=1.3)
    for sampling in (Sampling(1.0), Sampling(0.6), warped):
        out = engine.generate(prompts, max_new_tokens=10, sampling=sampling, generator_seed=2)
        scored = response_logprobs_no_grad(model, prompts, [c.token_ids for c in out], pad_token_id=tok.pad_token_id,
                               temperature=sampling.temperature, micro_batch_size=4)
        for c, lp in zip(out, scored):
            torch.testing.assert_close(torch.tensor(c.logprobs), lp, rtol=1e-4, atol=1e-4)


def test_greedy_is_deterministic_without_seed():
    engine, _, _ = _engine()
    a = engine.generate([[1, 2]], max_new_tokens=6, sampling=GREEDY)
    b = engine.generate([[1, 2]], max_new_tokens=6, sampling=GREEDY)
    assert a[0].token_ids == b[0].token_ids


def test_top_k_draws_only_the_k_most_likely_tokens():
    engine, model, _ = _engine(seed=2)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[3, 4, 5]])).logits[0, -1]  # [V]
    top = set(logits.topk(4).indices.tolist())
    out = engine.generate([[3, 4, 5]] * 200, max_new_tokens=1, sampling=Sampling(1.0, top_k=4), generator_seed=0)
    drawn = {c.token_ids[0] for c in out}
    assert drawn <= top and len(drawn) > 1
    plain = engine.generate([[3, 4, 5]] * 200, max_new_tokens=1, sampling=Sampling(1.0), generator_seed=0)
    assert not {c.token_ids[0] for c in plain} <= top  # without top_k the tiny model draws far more widely
