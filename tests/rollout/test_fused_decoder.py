"""The fused decoding step (q/k/v stacked, oneDNN-prepacked weights) against the model's own forward."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import GREEDY, Sampling, fused_decoder
from rlvr.rollout.decode_engine import CACHE_KWARG, DecodeEngine, make_cache

PROMPTS = [[7, 8, 9, 10, 11]] * 3 + [[12, 13]] * 3 + [[14, 15, 16]] * 2


def _qwen2_with_bias():
    """Qwen2 layout: q/k/v with bias, o without; GQA 4 heads over 2."""
    config = Qwen2Config(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, max_position_embeddings=256,
                         tie_word_embeddings=False, use_sliding_window=False)
    torch.manual_seed(3)
    model = Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():  # transformers zero-initialises biases: make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def _llama_scaled_rope():
    """Llama with a llama3 rope scaling (the rotary module's own code must be the one used) and MHA."""
    config = LlamaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=4, intermediate_size=80, max_position_embeddings=512,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 64})
    torch.manual_seed(4)
    return LlamaForCausalLM(config).float().eval()


MODELS = {"tiny-llama-gqa": lambda: tiny_random_model_and_tokenizer(seed=1)[0].eval(),
          "qwen2-bias": _qwen2_with_bias, "llama-rope-scaled-mha": _llama_scaled_rope}


@pytest.mark.parametrize("prepack", [True, False])
@pytest.mark.parametrize("name", list(MODELS))
def test_fused_step_equals_model_forward(name, prepack):
    """Prefill a left-padded batch, then decode 6 steps both ways from the same cache state."""
    model = MODELS[name]()
    assert fused_decoder.supports(model)
    torch.manual_seed(0)
    ids = torch.randint(3, 250, (4, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding of different widths
    mask[3, :5] = 0
    caches = [make_cache(model.config, 7 + 6) for _ in range(2)]
    with torch.no_grad():
        for cache in caches:
            model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                  **{CACHE_KWARG: cache}, use_cache=True)
        decoder = fused_decoder.FusedDecoder(model, prepack=prepack, batch_hint=3)  # the batch hint is only a hint
        if prepack and fused_decoder.can_prepack(model.lm_head.weight):
            assert decoder.head.packed is not None, "this CPU build should prepack: the test would not cover it"
        position = mask.sum(-1)
        token = torch.randint(3, 250, (4, 1))
        for _ in range(6):
            mask = torch.cat([mask, mask.new_ones((4, 1))], dim=1)
            plain = model(input_ids=token, attention_mask=mask, position_ids=position[:, None],
                          **{CACHE_KWARG: caches[0]}, use_cache=True).logits[:, -1, :]
            fused = decoder.step(token, mask, position[:, None], caches[1])
            torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
            token, position = plain.argmax(-1, keepdim=True), position + 1


def test_under_autocast_products_run_in_the_autocast_dtype():
    """bf16=true generates under autocast: the step must not run the fp32 packed products then."""
    model = MODELS["tiny-llama-gqa"]()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        decoder = fused_decoder.FusedDecoder(model)
        assert decoder.head.packed is None and all(p.packed is None for p in decoder.layers[0].values())
        x = torch.randn(2, 1, 64)
        assert decoder.layers[0]["qkv"](x).dtype == torch.bfloat16


def _engine(model, fused, eos=(299,)):
    return DecodeEngine(model, pad_token_id=0, eos_token_ids=list(eos), fused=fused)


@pytest.mark.parametrize("name", list(MODELS))
def test_engine_fused_equals_plain_sampling_and_greedy(name, monkeypatch):
    model = MODELS[name]()
    steps = []
    original = fused_decoder.FusedDecoder.step
    monkeypatch.setattr(fused_decoder.FusedDecoder, "step", lambda self, *a: steps.append(1) or original(self, *a))
    for sampling in (GREEDY, Sampling(1.0), Sampling(0.7, top_p=0.9)):
        a = _engine(model, True).generate(PROMPTS, max_new_tokens=10, sampling=sampling, generator_seed=5)
        b = _engine(model, False).generate(PROMPTS, max_new_tokens=10, sampling=sampling, generator_seed=5)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)
    assert len(steps) >= 3 * 9, "the fused engine must decode through FusedDecoder.step"


def test_fused_decoding_option_reaches_the_engine():
    from rlvr.config import load_config
    from rlvr.train.plan import engine_plan
    from rlvr.train.setup import engine_spec

    def _spec(cfg, *, is_main):
        return engine_spec(cfg, engine_plan(cfg), is_main=is_main)

    assert _spec(load_config(None, []), is_main=True) == ("rlvr", {"max_batch_size": 64, "fused": True})
    off = load_config(None, ["fused_decoding=false"])
    assert _spec(off, is_main=True)[1]["fused"] is False


def test_weights_changed_between_calls_are_used():
    """The stacked weights are rebuilt per call: an optimiser step in between is seen."""
    model = MODELS["tiny-llama-gqa"]()
    fused, plain = _engine(model, True), _engine(model, False)
    sampling = Sampling(1.0)
    before = fused.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.k_proj.weight.mul_(-3.0)
            layer.mlp.up_proj.weight.add_(0.2)
    after = fused.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    reference = plain.generate(PROMPTS, max_new_tokens=8, sampling=sampling, generator_seed=1)
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]
    for x, y in zip(after, reference):
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)
    changed = [c.logprobs[1:] != b.logprobs[1:] for c, b in zip(after, before)]  # step 0 is the prefill's
    assert all(changed), "the perturbation must change every row's decoding-step log-probs"


def test_supports_only_plain_llama_family():
    model = MODELS["tiny-llama-gqa"]()
    assert fused_decoder.supports(model)
    import peft  # a dependency of rlvr
    lora = peft.get_peft_model(tiny_random_model_and_tokenizer(seed=1)[0],
                               peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert not fused_decoder.supports(lora)  # a PeftModel: no lm_head/model layout at the top
    assert not fused_decoder.supports(lora.base_model.model)  # LoRA layers instead of nn.Linear
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert not fused_decoder.supports(gpt2)


@pytest.mark.parametrize("bucket", [4, 16, 64])
def test_attention_length_buckets_change_nothing_but_shapes(bucket, monkeypatch):
    """kv_bucket > 1 (CUDA's default) attends over masked positions past the filled ones: same samples,
    same log-probs as exact lengths and as the model's forward; the attention's key lengths are multiples
    of the bucket (or the cache's capacity)."""
    model = MODELS["qwen2-bias"]()
    lengths = []
    sdpa = fused_decoder.F.scaled_dot_product_attention
    monkeypatch.setattr(fused_decoder.F, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: (q.shape[2] == 1 and lengths.append(k.shape[2])) or sdpa(q, k, v, **kw))
    sampling = Sampling(1.0)
    bucketed = DecodeEngine(model, pad_token_id=0, eos_token_ids=[299], kv_bucket=bucket).generate(
        PROMPTS, max_new_tokens=12, sampling=sampling, generator_seed=2)
    capacity = 5 + 12  # widest prompt + new tokens
    assert len(lengths) >= 11 * 2, "the decoding steps' attention (2 layers) must have been seen"
    assert lengths and all(n % bucket == 0 or n == capacity for n in lengths)
    assert len(set(lengths)) <= -(-capacity // bucket)
    for other in (DecodeEngine(model, pad_token_id=0, eos_token_ids=[299], kv_bucket=1),
                  DecodeEngine(model, pad_token_id=0, eos_token_ids=[299], fused=False)):
        exact = other.generate(PROMPTS, max_new_tokens=12, sampling=sampling, generator_seed=2)
        assert [c.token_ids for c in bucketed] == [c.token_ids for c in exact]
        for x, y in zip(bucketed, exact):
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=1e-5, atol=1e-5)


def test_buckets_default_to_128_on_cuda_only():
    assert fused_decoder.kv_bucket_for(torch.device("cuda", 0)) == 128
    assert fused_decoder.kv_bucket_for("cpu") == 1
