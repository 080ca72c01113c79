"""The generation knobs and the entropy bonus in a real run: the on-policy log-probs still agree."""

import math

import pytest
import torch

from rlvr.config import build_config
from rlvr.train.trainer import Trainer
from tests.helpers.engines import local_engines

from .conftest import tiny_overrides


@pytest.mark.parametrize("engine", local_engines())
def test_a_run_with_top_k_min_p_repetition_penalty_and_entropy_bonus(tmp_path, lowercase_reward, engine):
    cfg = build_config(tiny_overrides(tmp_path / "run", max_steps=1, reward_funcs=[lowercase_reward],
                                      rollout_engine=engine, temperature=0.8, top_k=20, min_p=0.05,
                                      repetition_penalty=1.2, entropy_coef=0.01,
                                      chat_template_kwargs={"enable_thinking": False}))
    trainer = Trainer(cfg)
    assert trainer.prompt_builder.format.chat_template_kwargs == {"enable_thinking": False}  # prompts are rendered with them
    before = {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}
    (metrics,) = trainer.train()
    # the sampler reports the policy's log softmax(logits / T), as the trainer computes: the warps
    # (top_k = 20 of 259 tokens keeps a small part of the tiny model's mass) do not enter it
    assert metrics["rollout/logprob_mismatch"] < 1e-4
    assert math.isfinite(metrics["train/loss"]) and metrics["train/entropy"] > 0
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
