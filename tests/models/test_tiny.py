import torch

from rlvr.models import tiny_random_model_and_tokenizer


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_seed_same_weights_other_seed_differs():
    model_a, _ = tiny_random_model_and_tokenizer(seed=3)
    model_b, _ = tiny_random_model_and_tokenizer(seed=3)
    model_c, _ = tiny_random_model_and_tokenizer(seed=4)
    assert _same_weights(model_a, model_b)
    assert not _same_weights(model_a, model_c)


def test_global_rng_neither_read_nor_advanced():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_random_model_and_tokenizer(seed=0)
    assert torch.equal(torch.rand(3), expected)
    # and the weights do not depend on the global state
    torch.manual_seed(999)
    model_a, _ = tiny_random_model_and_tokenizer(seed=0)
    torch.manual_seed(1)
    model_b, _ = tiny_random_model_and_tokenizer(seed=0)
    assert _same_weights(model_a, model_b)


def test_shape_dtype_and_generation_ids():
    model, tokenizer = tiny_random_model_and_tokenizer()
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers) == (64, 2)
    assert (config.num_attention_heads, config.num_key_value_heads, config.intermediate_size) == (4, 2, 128)
    assert config.vocab_size == len(tokenizer) == 259
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|pad|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id == 257
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id == 258


def test_bytes_are_token_ids_and_decode_round_trips():
    _, tokenizer = tiny_random_model_and_tokenizer()
    text = "héllo 12+7=\n"
    ids = tokenizer(text).input_ids
    assert ids == list(text.encode("utf-8"))  # no merges, no bos: one token per byte, id = byte
    assert tokenizer.decode(ids) == text
    assert tokenizer("<|im_start|>x<|im_end|>").input_ids == [256, ord("x"), 257]


def test_chat_template_renders_chatml():
    _, tokenizer = tiny_random_model_and_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n"
    )
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("2+3?<|im_end|>\n<|im_start|>assistant\n")


def test_generates_from_a_left_padded_batch():
    model, tokenizer = tiny_random_model_and_tokenizer()
    batch = tokenizer(["a", "longer prompt"], return_tensors="pt", padding=True)
    assert batch.input_ids[0, 0].item() == tokenizer.pad_token_id  # left padding
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, batch.input_ids.shape[1] + 4)
