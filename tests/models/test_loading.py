import os
import re

import pytest
import torch
from huggingface_hub import is_offline_mode

from rlvr.models import (
    ALIASES,
    apply_lora,
    copy_for_reference,
    eos_token_ids,
    load_policy,
    loading,
    parse_dtype,
    tiny_random_model_and_tokenizer,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("float32", torch.float32),
        ("fp32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("BF16", torch.bfloat16),
    ],
)
def test_parse_dtype(name, expected):
    assert parse_dtype(name) is expected


@pytest.mark.parametrize("bad", ["float16", "fp64", "", torch.float32, None])
def test_parse_dtype_rejects_with_the_valid_names(bad):
    with pytest.raises(ValueError, match=re.escape("'bf16', 'bfloat16', 'float32', 'fp32'")):
        parse_dtype(bad)


def test_load_policy_rejects_bad_dtype_before_loading():
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_policy("tiny-random", dtype="half")


def test_aliases():
    assert set(ALIASES) == {"smollm2-135m", "tiny-random"}


def test_load_tiny_random():
    model, tokenizer = load_policy("tiny-random", seed=5)
    reference, _ = tiny_random_model_and_tokenizer(seed=5)
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == "<|pad|>"
    expected = reference.state_dict()
    assert all(torch.equal(expected[k], v) for k, v in model.state_dict().items())
    bf16_model, _ = load_policy("tiny-random", dtype="bf16")
    assert {p.dtype for p in bf16_model.parameters()} == {torch.bfloat16}


def test_eos_token_ids_merges_sources_without_duplicates():
    model, tokenizer = load_policy("tiny-random")
    assert eos_token_ids(model, tokenizer) == [257]
    model.generation_config.eos_token_id = [257, 7]  # int or list both accepted
    assert eos_token_ids(model, tokenizer) == [257, 7]
    tokenizer.eos_token = "<|pad|>"  # <|im_end|> is still added because it is in the vocab
    model.generation_config.eos_token_id = 9
    assert eos_token_ids(model, tokenizer) == [258, 9, 257]


def test_pad_token_falls_back_to_eos(tmp_path):
    model, tokenizer = tiny_random_model_and_tokenizer()
    tokenizer.pad_token = None
    model.generation_config.pad_token_id = None
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, tokenizer = load_policy(str(tmp_path))
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert model.generation_config.pad_token_id == 257


def test_local_path_round_trip(tmp_path):
    model, tokenizer = tiny_random_model_and_tokenizer(seed=2)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_policy(tmp_path)  # a Path works as well as a str
    saved = model.state_dict()
    assert all(torch.equal(saved[k], v) for k, v in loaded.state_dict().items())
    text = "<|im_start|>user\nhé 12<|im_end|>\n"
    assert loaded_tokenizer(text).input_ids == tokenizer(text).input_ids
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert loaded_tokenizer.padding_side == "left"
    assert eos_token_ids(loaded, loaded_tokenizer) == [257]


def test_pickle_weights_need_explicit_opt_in(tmp_path):
    model, tokenizer = tiny_random_model_and_tokenizer()
    model.config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    # What save_pretrained(safe_serialization=False) wrote before transformers 5 (which ignores the
    # flag and always writes safetensors): only a pickle pytorch_model.bin.
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="allow_pickle_weights=True"):
        load_policy(str(tmp_path))
    loaded, _ = load_policy(str(tmp_path), allow_pickle_weights=True)
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


@pytest.mark.parametrize("trust_remote_code", [False, True])
def test_trust_remote_code_is_off_by_default_and_passed_through(tmp_path, monkeypatch, trust_remote_code):
    model, tokenizer = tiny_random_model_and_tokenizer()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    seen = []
    for cls in (loading.AutoModelForCausalLM, loading.AutoTokenizer):
        real = cls.from_pretrained

        def spy(*args, real=real, **kwargs):
            seen.append((kwargs["trust_remote_code"], kwargs.get("use_safetensors")))
            return real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    load_policy(str(tmp_path))
    assert seen == [(False, None), (False, True)]  # tokenizer, then model (safetensors only)
    seen.clear()
    load_policy(str(tmp_path), trust_remote_code=trust_remote_code)
    assert seen == [(trust_remote_code, None), (trust_remote_code, True)]


@pytest.mark.parametrize("path", ["./no/such/model", os.path.join("a", "b", "c"), "/definitely/not/here"])
def test_unknown_local_path_names_it(path):
    with pytest.raises(ValueError, match=re.escape(f"local model folder {path!r} does not exist")):
        load_policy(path)


def test_file_instead_of_folder(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_text("")
    with pytest.raises(ValueError, match="is a file; pass the folder"):
        load_policy(str(file))


@pytest.mark.skipif(not is_offline_mode(), reason="online, the Hub lookup would be real")
def test_hub_id_offline_explains_and_lists_aliases():
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE") as info:
        load_policy("someone/not-a-cached-model")
    assert "tiny-random" in str(info.value) and "smollm2-135m" in str(info.value)


def test_apply_lora_trains_only_adapters():
    model, _ = tiny_random_model_and_tokenizer()
    lora = apply_lora(model, r=4, alpha=8, dropout=0.0)
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    # all-linear: q,k,v,o,gate,up,down in each of 2 layers, A and B each; not the lm_head
    assert len(trainable) == 2 * 7 * 2
    assert not any("lm_head" in name for name in trainable)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"r": 0, "alpha": 8, "dropout": 0.0}, "r must be"), ({"r": 4, "alpha": 0, "dropout": 0.0}, "alpha"),
     ({"r": 4, "alpha": 8, "dropout": 1.0}, "dropout")],
)
def test_apply_lora_validates(kwargs, message):
    model, _ = tiny_random_model_and_tokenizer()
    with pytest.raises(ValueError, match=message):
        apply_lora(model, **kwargs)


def test_copy_for_reference_is_frozen_and_independent():
    model, _ = tiny_random_model_and_tokenizer()
    model.train()
    reference = copy_for_reference(model)
    assert not reference.training and all(not m.training for m in reference.modules())
    assert not any(p.requires_grad for p in reference.parameters())
    assert all(p.requires_grad for p in model.parameters()) and model.training
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    assert not torch.equal(model.lm_head.weight, reference.lm_head.weight)


def test_copy_for_reference_of_a_lora_model():
    model, _ = tiny_random_model_and_tokenizer()
    lora = apply_lora(model, r=2, alpha=4, dropout=0.0)
    reference = copy_for_reference(lora)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(lora(ids).logits, reference(ids).logits)
    assert not any(p.requires_grad for p in reference.parameters())
