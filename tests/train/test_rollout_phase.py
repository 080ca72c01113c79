"""Rollout phase: group ids, DAPO dynamic sampling, hostile completions never stop a step."""

import time

import pytest
import torch

from rlvr.config import build_config
from rlvr.rollout import Completion
from rlvr.train.rewarding import Rewarder
from rlvr.train.rollout_phase import Group
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

# Groups whose gold answer is even get the same reward for every response (uniform); the others
# get the lowercase fraction, which varies across responses.
PARITY_REWARD = '''
def parity(prompts, completions, answer, **kw):
    out = []
    for c, a in zip(completions, answer):
        if int(a) % 2 == 0:
            out.append(0.5)
        else:
            out.append(sum(ch.islower() for ch in c) / max(1, len(c)) + 1e-3 * len(c))
    return out
'''


@pytest.fixture
def parity_reward(tmp_path):
    path = tmp_path / "parity.py"
    path.write_text(PARITY_REWARD)
    return f"{path}:parity"


def test_group_ids_are_unique_and_shared_within_groups(tmp_path, parity_reward):
    trainer = Trainer(build_config(tiny_overrides(tmp_path / "r", reward_funcs=[parity_reward])))
    result = trainer.training_step(1).rollout
    ids = [g.group_id for g in result.generated]
    assert len(set(ids)) == len(ids) == 4
    assert all(len(g.completions) == 4 for g in result.generated)
    trainer.rewarder.close()


def test_dynamic_sampling_keeps_only_mixed_groups_and_refills(tmp_path, parity_reward):
    cfg = build_config(tiny_overrides(tmp_path / "r", algo="dapo", reward_funcs=[parity_reward],
                                      data="rg:basic_arithmetic:size=64:seed=3", max_num_gen_batches=6))
    trainer = Trainer(cfg)
    result = trainer.training_step(1).rollout
    trainer.rewarder.close()
    uniform_generated = [g for g in result.generated if g.uniform]
    assert uniform_generated, "the fixture must produce some uniform groups"
    assert all(not g.uniform for g in result.kept)
    assert len(result.kept) <= cfg.rollout.prompts_per_step
    assert result.rounds > 1  # some groups were dropped, so it drew more prompts
    assert len(result.generated) == 4 * result.rounds
    assert trainer.sampler.position == 4 * result.rounds


def test_hostile_completions_score_zero_and_finish(tmp_path):
    rewarder = Rewarder(["accuracy"], None, verifier_workers=1, verifier_timeout=1.0, answer_extraction="boxed")
    texts = [
        "x" * 1_000_000,
        "\\boxed{" * 10_000 + "1" + "}" * 10_000,
        "\\boxed{9^{9^{9^{9^{9^{9}}}}}}",
        "\\boxed{\\frac{1}{2}",  # unbalanced
        "The answer is \\boxed{42}",
    ]
    group = Group(group_id=1, row={"id": "a", "prompt": "q", "answer": "42"}, prompt_ids=[1],
                  completions=[Completion([1], [0.0], False)] * len(texts), texts=texts)
    start = time.monotonic()
    stats = rewarder.reward_groups([group])
    rewarder.close()
    assert time.monotonic() - start < 30
    assert group.rewards == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert stats["rewards/accuracy/calls"] == 5


def test_step_without_signal_skips_the_update(tmp_path):
    # tiny-random never answers arithmetic: every group is uniformly 0, dynamic sampling keeps none.
    cfg = build_config(tiny_overrides(tmp_path / "r", algo="dapo", max_num_gen_batches=2, max_steps=1))
    trainer = Trainer(cfg)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    (metrics,) = trainer.train()
    assert metrics["rollout/kept_groups"] == 0 and metrics["rollout/num_gen_batches"] == 2
    assert metrics["rollout/frac_uniform_groups"] == 1.0
    assert metrics["train/loss"] is None and metrics["train/grad_norm"] is None
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())
