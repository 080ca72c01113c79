"""DecodeEngine (rlvr's sampling loop) against transformers generate and the model's own distribution."""

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MistralConfig,
    Qwen2Config,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.cache_utils import DynamicCache

from rlvr.models import eos_token_ids, tiny_random_model_and_tokenizer
from rlvr.rollout import GREEDY, HFEngine, Sampling, decode_engine
from rlvr.rollout.decode_engine import DecodeEngine, DecodeState, DeviceSampler
from rlvr.rollout.kv_cache import PreallocatedLayer, make_cache
from rlvr.train.batching import response_logprobs_no_grad


def _engines(seed=0, eos=None, **kwargs):
    model, tok = tiny_random_model_and_tokenizer(seed=seed)
    eos = eos or eos_token_ids(model, tok)
    fast = DecodeEngine(model, pad_token_id=tok.pad_token_id, eos_token_ids=eos, **kwargs)
    plain = HFEngine(model, pad_token_id=tok.pad_token_id, eos_token_ids=eos)
    return fast, plain, model, tok


# Groups of repeated prompts of unequal lengths, as the trainer sends them.
PROMPTS = [[7, 8, 9, 10, 11]] * 3 + [[12, 13]] * 3 + [[14, 15, 16]] * 2


def _frequent_token(model, tok):
    """A token greedy decoding emits early in several rows: used as EOS so rows end at different steps."""
    _, plain, _, _ = _engines()
    out = plain.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    counts = torch.bincount(torch.tensor([t for c in out for t in c.token_ids[1:6]]))
    return int(counts.argmax())


def test_greedy_equals_generate_with_rows_ending_at_different_steps():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    eos = [_frequent_token(model, tok)]
    fast, plain, _, _ = _engines(eos=eos)
    a = fast.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    b = plain.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.truncated for c in a] == [c.truncated for c in b]
    lengths = {len(c.token_ids) for c in a}
    assert len(lengths) > 1, "the test needs rows that stop at different steps (compaction)"
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)


def test_contract_eos_cut_and_truncation_flag():
    eos = list(range(100, 130))  # ~1 in 9 sampled tokens ends a row (the tiny model is near uniform)
    fast, _, _, _ = _engines(eos=eos)
    out = fast.generate(PROMPTS, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=0)
    assert len(out) == len(PROMPTS)
    for c in out:
        assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
        assert not any(t in eos for t in c.token_ids[:-1])
        assert c.truncated == (c.token_ids[-1] not in eos)
        if c.truncated:
            assert len(c.token_ids) == 12
    assert any(not c.truncated for c in out)  # EOS cuts happened (truncation: see the greedy test)


# top_k = 10 of the tiny model's near-uniform vocabulary keeps little mass: a log-prob renormalised over
# the warped distribution would be far from the policy's log softmax(logits / T)
WARPED = Sampling(0.7, top_k=10, min_p=0.05, repetition_penalty=1.3)


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.6), WARPED], ids=["T1", "T0.6", "warped"])
def test_sampling_logprobs_equal_teacher_forced_scores(sampling):
    model, tok = tiny_random_model_and_tokenizer(seed=1)
    eos = [_frequent_token(model, tok)]
    fast, _, _, _ = _engines(seed=1, eos=eos, max_batch_size=5)  # two chunks, each with shared prompts
    out = fast.generate(PROMPTS, max_new_tokens=10, sampling=sampling, generator_seed=2)
    scored = response_logprobs_no_grad(model, PROMPTS, [c.token_ids for c in out], pad_token_id=tok.pad_token_id,
                           temperature=sampling.temperature, micro_batch_size=8)
    for c, lp in zip(out, scored):
        torch.testing.assert_close(torch.tensor(c.logprobs), lp, rtol=1e-5, atol=1e-5)


def test_compaction_does_not_change_results():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    eos = [_frequent_token(model, tok)]
    compacting, _, _, _ = _engines(eos=eos, compact_below=1.0)  # drop finished rows at every step
    never, _, _, _ = _engines(eos=eos, compact_below=0.0)
    a = compacting.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    b = never.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    # Sampling too: every row draws from its own position of the step's uniform numbers.
    eos = list(range(100, 130))  # sampled rows end at different steps
    compacting, _, _, _ = _engines(eos=eos, compact_below=1.0)
    never, _, _, _ = _engines(eos=eos, compact_below=0.0)
    a = compacting.generate(PROMPTS, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=4)
    b = never.generate(PROMPTS, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=4)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert len({len(c.token_ids) for c in a}) > 1


def _expected_first_token_probs(model, prompt, temperature, top_p):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[:, -1, :].float()  # [1, V]
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)]
                                  + ([TopPLogitsWarper(top_p)] if top_p < 1 else []))
    return torch.softmax(warpers(None, logits), dim=-1)[0]  # [V]


def _chi_square_z(freq_counts: torch.Tensor, probs: torch.Tensor, n: int) -> float:
    """Pearson chi-square of the counts against probs, as a z-score (bins with expected count < 5 pooled)."""
    expected = probs * n
    big = expected >= 5
    observed = torch.cat([freq_counts[big], freq_counts[~big].sum().view(1)]).double()
    expected = torch.cat([expected[big], expected[~big].sum().view(1)]).double()
    keep = expected > 0
    chi2 = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    return (chi2 - dof) / (2 * dof) ** 0.5


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.5, 0.8)])
def test_samples_follow_the_tempered_nucleus_distribution(temperature, top_p):
    fast, _, model, _ = _engines(seed=2)
    n = 6000
    out = fast.generate([[3, 4, 5]] * n, max_new_tokens=1, sampling=Sampling(temperature, top_p), generator_seed=0)
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in out]), minlength=model.config.vocab_size)
    probs = _expected_first_token_probs(model, [3, 4, 5], temperature, top_p)
    assert int(counts[probs == 0].sum()) == 0  # nothing outside the nucleus
    assert abs(_chi_square_z(counts, probs, n)) < 4  # |z| >= 4 would be a 1-in-15000 fluke
    assert _chi_square_z(counts, probs.roll(1), n) > 10  # the check sees an off-by-one token


@pytest.mark.parametrize("sampling", [Sampling(1.0, top_k=5), Sampling(0.5, min_p=0.3),
                                      Sampling(0.8, top_k=12, min_p=0.5)], ids=["top_k", "min_p", "both"])
def test_samples_stay_in_the_top_k_and_min_p_support(sampling):
    fast, _, model, _ = _engines(seed=2)
    n = 6000
    out = fast.generate([[3, 4, 5]] * n, max_new_tokens=1, sampling=sampling, generator_seed=0)
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in out]), minlength=model.config.vocab_size)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[3, 4, 5]])).logits[0, -1].float()  # [V]
    probs = torch.softmax(logits / sampling.temperature, dim=-1)  # [V]
    keep = torch.ones_like(probs, dtype=torch.bool)
    if sampling.top_k:  # the k most likely tokens
        keep &= probs >= probs.topk(sampling.top_k).values[-1]
    if sampling.min_p is not None:  # at least min_p x the most likely token's probability
        keep &= probs >= sampling.min_p * probs.max()
    assert 1 < int(keep.sum()) < len(probs)  # the warp removes tokens and leaves a choice
    assert int(counts[~keep].sum()) == 0
    expected = torch.where(keep, probs, torch.zeros_like(probs)) / probs[keep].sum()  # renormalised over keep
    assert abs(_chi_square_z(counts, expected, n)) < 4


def test_repetition_penalty_changes_a_repeated_tokens_chance_as_the_formula_says():
    # Logits [2, 1, 0.5, -1]; the row's prompt is [0, 3] left-padded with token 1 (padding is not a
    # token of the row). Penalty r = 2 on tokens 0 and 3: l > 0 → l / r, l < 0 → l · r, so the
    # sampler draws from softmax([1, 1, 0.5, -2]) = [0.376, 0.376, 0.228, 0.019]; penalising the pad
    # too would give [0.442, 0.268, 0.268, 0.022]. The log-prob stays log softmax([2, 1, 0.5, -1]).
    n = 20000
    sampler = DeviceSampler(Sampling(1.0, repetition_penalty=2.0), "cpu")
    state = DecodeState.start(torch.tensor([[1, 0, 3]] * n), torch.tensor([[0, 1, 1]] * n), capacity=4,
                              max_new_tokens=1, seed_words=decode_engine.split_seeds(range(n), "cpu"),
                              eos_token_ids=[9], pad_token_id=1)
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]]).expand(n, -1)
    chosen, logp = sampler(logits, state.seed_words, state.step, state.history)
    expected = torch.softmax(torch.tensor([1.0, 1.0, 0.5, -2.0]), dim=-1)
    assert abs(_chi_square_z(torch.bincount(chosen, minlength=4), expected, n)) < 4
    torch.testing.assert_close(logp, torch.log_softmax(logits, dim=-1).gather(-1, chosen[:, None]).squeeze(-1))
    wrong = torch.softmax(torch.tensor([1.0, 0.5, 0.5, -2.0]), dim=-1)
    assert _chi_square_z(torch.bincount(chosen, minlength=4), wrong, n) > 10  # the check sees a penalised pad


def test_greedy_with_repetition_penalty_equals_generate():
    # Prompts of unequal lengths (left padding) and rows ending at different steps (compaction): the
    # penalty must see each row's own prompt and response, as generate's does.
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    eos = [_frequent_token(model, tok)]
    fast, plain, _, _ = _engines(eos=eos)
    penalised = Sampling(0.0, repetition_penalty=3.0)  # 1.5 leaves the tiny model's greedy choices as they are
    a = fast.generate(PROMPTS, max_new_tokens=12, sampling=penalised)
    b = plain.generate(PROMPTS, max_new_tokens=12, sampling=penalised)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)
    unpenalised = fast.generate(PROMPTS, max_new_tokens=12, sampling=GREEDY)
    assert [c.token_ids for c in a] != [c.token_ids for c in unpenalised]


def test_warped_sampling_is_reproducible_and_independent_of_compaction():
    eos = list(range(100, 130))  # sampled rows end at different steps
    compacting, _, _, _ = _engines(seed=3, eos=eos, compact_below=1.0)
    never, _, _, _ = _engines(seed=3, eos=eos, compact_below=0.0)
    a = compacting.generate(PROMPTS, max_new_tokens=12, sampling=WARPED, generator_seed=5)
    b = never.generate(PROMPTS, max_new_tokens=12, sampling=WARPED, generator_seed=5)
    c = compacting.generate(PROMPTS, max_new_tokens=12, sampling=WARPED, generator_seed=5)
    plain = compacting.generate(PROMPTS, max_new_tokens=12, sampling=Sampling(0.7), generator_seed=5)
    assert [x.token_ids for x in a] == [x.token_ids for x in b] == [x.token_ids for x in c]
    assert [x.token_ids for x in a] != [x.token_ids for x in plain]
    assert len({len(x.token_ids) for x in a}) > 1


def test_row_seeds_make_a_row_independent_of_its_batch():
    fast, _, _, _ = _engines(seed=3)
    alone = fast.generate([[7, 8, 9]], max_new_tokens=8, sampling=Sampling(1.0), row_seeds=[11])
    mixed = fast.generate([[1, 2], [7, 8, 9], [4, 5, 6, 7]], max_new_tokens=8, sampling=Sampling(1.0),
                          row_seeds=[5, 11, 9])
    again = fast.generate([[7, 8, 9]] * 2, max_new_tokens=8, sampling=Sampling(1.0), row_seeds=[12, 11])
    assert alone[0].token_ids == mixed[1].token_ids == again[1].token_ids
    assert again[0].token_ids != again[1].token_ids
    with pytest.raises(ValueError, match="row_seeds"):
        fast.generate([[1]], max_new_tokens=2, sampling=Sampling(1.0), row_seeds=[1, 2])


def test_preallocated_cache_is_used_for_full_attention_and_not_for_sliding_windows():
    model, _ = tiny_random_model_and_tokenizer(seed=0)
    cache = make_cache(model.config, 16)
    assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
    sliding = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          intermediate_size=64, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert isinstance(make_cache(sliding, 16), DynamicCache)
    assert isinstance(make_cache(MistralConfig(sliding_window=8, num_hidden_layers=2), 16), DynamicCache)


def test_preallocated_layer_select_and_overflow():
    layer = PreallocatedLayer(capacity=4)
    k = torch.arange(3 * 1 * 2 * 2, dtype=torch.float32).view(3, 1, 2, 2)
    keys, _ = layer.update(k, k + 100)
    assert torch.equal(keys, k) and layer.get_seq_length() == 2
    layer.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(layer.keys, k[[2, 0]]) and torch.equal(layer.values, k[[2, 0]] + 100)
    layer.update(k[:2, :, :1], k[:2, :, :1])
    assert layer.get_seq_length() == 3
    with pytest.raises(RuntimeError, match="capacity"):
        layer.update(k[:2], k[:2])
