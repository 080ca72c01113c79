"""bf16 mixed precision: bf16 compute under autocast, fp32 master weights; close to fp32, unlike pure bf16."""

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import load_policy
from rlvr.parallel.runtime import autocast
from rlvr.train.batching import collate, response_logprobs
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

TEXTS = [("What is 12 + 30?", " 12 + 30 = 42, so the answer is \\boxed{42}."),
         ("What is 7 times 6?", " Seven sixes are 42."),
         ("Name a prime above 10.", " 11 is prime: only 1 and 11 divide it."),
         ("What is 2 to the 5th?", " 2^5 = 32.")]


def _batch(tokenizer):
    prompts = [tokenizer(q)["input_ids"] for q, _ in TEXTS]
    responses = [tokenizer(a, add_special_tokens=False)["input_ids"] for _, a in TEXTS]
    return collate(prompts, responses, pad_token_id=tokenizer.pad_token_id or 0)


def _gradient(model, batch, *, dtype=None, head_chunk=0) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    with autocast("cpu", dtype):
        logprobs, _ = response_logprobs(model, batch, temperature=1.0, head_chunk=head_chunk)
    weights = torch.linspace(-1.0, 1.0, logprobs.numel()).view_as(logprobs)
    (logprobs * weights * batch.response_mask).sum().backward()
    return torch.cat([p.grad.flatten().float() for p in model.parameters() if p.grad is not None])


@pytest.mark.slow
def test_bf16_mixed_gradient_is_the_fp32_gradient_on_smollm2():
    model, tokenizer = load_policy("smollm2-135m", dtype="float32")
    model.eval()
    batch = _batch(tokenizer)
    fp32 = _gradient(model, batch)
    for head_chunk in (0, 16):
        mixed = _gradient(model, batch, dtype="bfloat16", head_chunk=head_chunk)
        cosine = float(torch.nn.functional.cosine_similarity(fp32, mixed, dim=0))
        assert cosine >= 0.999, (head_chunk, cosine)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the master weights stay fp32


@pytest.mark.slow
def test_one_step_at_lr_1e6_moves_almost_every_weight_in_bf16_mixed_not_in_pure_bf16():
    changed = {}
    for name, dtype, compute in (("mixed", "float32", "bfloat16"), ("pure", "bfloat16", None)):
        model, tokenizer = load_policy("smollm2-135m", dtype=dtype)
        model.eval()
        params = [p for p in model.parameters() if p.requires_grad]
        before = [p.detach().clone() for p in params]
        optimizer = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.99), weight_decay=0.0)
        _gradient(model, _batch(tokenizer), dtype=compute)
        optimizer.step()
        moved = sum(int((p.detach() != b).sum()) for p, b in zip(params, before))
        changed[name] = moved / sum(b.numel() for b in before)
    assert changed["mixed"] >= 0.99, changed
    assert changed["pure"] < 0.5, changed  # docs/scaling.md: most bf16 weights round the step away


def test_bf16_mixed_training_keeps_fp32_weights_and_a_small_logprob_mismatch(tmp_path, lowercase_reward):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[lowercase_reward], bf16=True, beta=0.04,
                                      max_steps=2, learning_rate=1e-3))
    trainer = Trainer(cfg)
    history = trainer.train()
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    for metrics in history:
        assert metrics["train/skipped_steps"] == 0 and metrics["train/grad_norm"] > 0
        assert metrics["rollout/logprob_mismatch"] < 1e-3  # sampled and scored under the same autocast


def test_bf16_with_bf16_weights_is_taken_as_trl_recipes_write_it():
    # open-r1's recipes set torch_dtype: bfloat16 and bf16: true: bf16 weights, and autocast that changes nothing
    cfg = build_config({"bf16": True, "dtype": "bfloat16"})
    assert cfg.model.bf16 and cfg.model.dtype == "bfloat16"
