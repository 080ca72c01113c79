"""The colocated vLLM engine's options reach vLLM: its context length, and sleep mode refused on CPU
with the reason (vLLM's sleep mode needs CUDA). Run by ``make test-vllm``."""

import pytest

from rlvr.rollout import GREEDY, build_engine
from tests.rollout.test_vllm_engine import EOS, PAD_ID, tiny_llama

pytestmark = pytest.mark.vllm


def test_sleep_mode_is_refused_on_cpu_with_the_reason():
    with pytest.raises(ValueError, match=r"vllm_enable_sleep_mode=true: vLLM's sleep mode is not available .*CUDA"):
        build_engine("vllm", tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS], enable_sleep_mode=True)


def test_max_model_length_is_the_engines_context():
    engine = build_engine("vllm", tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS], max_model_len=64)
    assert engine.max_model_len == 64 and engine.llm.llm_engine.model_config.max_model_len == 64
    assert len(engine.generate([[1, 2, 3]], max_new_tokens=8, sampling=GREEDY)) == 1
    with pytest.raises(ValueError, match="exceeds the vLLM engine's max_model_len 64"):
        engine.generate([list(range(60))], max_new_tokens=8, sampling=GREEDY)


def test_the_compute_dtype_and_eager_mode_reach_vllm():
    """bf16=true hands vLLM dtype=bfloat16 (the plan's compute dtype) for an fp32 policy; on CPU no graphs."""
    engine = build_engine("vllm", tiny_llama(), pad_token_id=PAD_ID, eos_token_ids=[EOS], max_model_len=64,
                          dtype="bfloat16")
    model_config = engine.llm.llm_engine.model_config
    assert str(model_config.dtype) == "torch.bfloat16" and model_config.enforce_eager is True
    assert len(engine.generate([[1, 2, 3]], max_new_tokens=4, sampling=GREEDY)[0].token_ids) >= 1
