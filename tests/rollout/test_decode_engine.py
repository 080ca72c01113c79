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
from rlvr.rollout import HFEngine
from rlvr.rollout.decode_engine import DecodeEngine
from rlvr.rollout.kv_cache import PreallocatedLayer, make_cache
from rlvr.train.scoring import score_no_grad


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
    out = plain.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    counts = torch.bincount(torch.tensor([t for c in out for t in c.token_ids[1:6]]))
    return int(counts.argmax())


def test_greedy_equals_generate_with_rows_ending_at_different_steps():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    eos = [_frequent_token(model, tok)]
    fast, plain, _, _ = _engines(eos=eos)
    a = fast.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    b = plain.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.truncated for c in a] == [c.truncated for c in b]
    lengths = {len(c.token_ids) for c in a}
    assert len(lengths) > 1, "the test needs rows that stop at different steps (compaction)"
    for x, y in zip(a, b):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)


def test_contract_eos_cut_and_truncation_flag():
    eos = list(range(100, 130))  # ~1 in 9 sampled tokens ends a row (the tiny model is near uniform)
    fast, _, _, _ = _engines(eos=eos)
    out = fast.generate(PROMPTS, max_new_tokens=12, temperature=1.0, generator_seed=0)
    assert len(out) == len(PROMPTS)
    for c in out:
        assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
        assert not any(t in eos for t in c.token_ids[:-1])
        assert c.truncated == (c.token_ids[-1] not in eos)
        if c.truncated:
            assert len(c.token_ids) == 12
    assert any(not c.truncated for c in out)  # EOS cuts happened (truncation: see the greedy test)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampling_logprobs_equal_teacher_forced_scores(temperature):
    model, tok = tiny_random_model_and_tokenizer(seed=1)
    eos = [_frequent_token(model, tok)]
    fast, _, _, _ = _engines(seed=1, eos=eos, max_batch_size=5)  # two chunks, each with shared prompts
    out = fast.generate(PROMPTS, max_new_tokens=10, temperature=temperature, generator_seed=2)
    scored = score_no_grad(model, PROMPTS, [c.token_ids for c in out], pad_token_id=tok.pad_token_id,
                           temperature=temperature, micro_batch_size=8)
    for c, lp in zip(out, scored):
        torch.testing.assert_close(torch.tensor(c.logprobs), lp, rtol=1e-5, atol=1e-5)


def test_compaction_does_not_change_results():
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    eos = [_frequent_token(model, tok)]
    compacting, _, _, _ = _engines(eos=eos, compact_below=1.0)  # drop finished rows at every step
    never, _, _, _ = _engines(eos=eos, compact_below=0.0)
    a = compacting.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    b = never.generate(PROMPTS, max_new_tokens=12, temperature=0.0)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    # Sampling too: every row draws from its own position of the step's uniform numbers.
    eos = list(range(100, 130))  # sampled rows end at different steps
    compacting, _, _, _ = _engines(eos=eos, compact_below=1.0)
    never, _, _, _ = _engines(eos=eos, compact_below=0.0)
    a = compacting.generate(PROMPTS, max_new_tokens=12, temperature=1.0, generator_seed=4)
    b = never.generate(PROMPTS, max_new_tokens=12, temperature=1.0, generator_seed=4)
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
    out = fast.generate([[3, 4, 5]] * n, max_new_tokens=1, temperature=temperature, top_p=top_p, generator_seed=0)
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in out]), minlength=model.config.vocab_size)
    probs = _expected_first_token_probs(model, [3, 4, 5], temperature, top_p)
    assert int(counts[probs == 0].sum()) == 0  # nothing outside the nucleus
    assert abs(_chi_square_z(counts, probs, n)) < 4  # |z| >= 4 would be a 1-in-15000 fluke
    assert _chi_square_z(counts, probs.roll(1), n) > 10  # the check sees an off-by-one token


def test_row_seeds_make_a_row_independent_of_its_batch():
    fast, _, _, _ = _engines(seed=3)
    alone = fast.generate([[7, 8, 9]], max_new_tokens=8, temperature=1.0, row_seeds=[11])
    mixed = fast.generate([[1, 2], [7, 8, 9], [4, 5, 6, 7]], max_new_tokens=8, temperature=1.0, row_seeds=[5, 11, 9])
    again = fast.generate([[7, 8, 9]] * 2, max_new_tokens=8, temperature=1.0, row_seeds=[12, 11])
    assert alone[0].token_ids == mixed[1].token_ids == again[1].token_ids
    assert again[0].token_ids != again[1].token_ids
    with pytest.raises(ValueError, match="row_seeds"):
        fast.generate([[1]], max_new_tokens=2, temperature=1.0, row_seeds=[1, 2])


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
