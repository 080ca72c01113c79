"""trainer.py: what Trainer(cfg) builds from the config, the checks it makes before loading a model, and one RL
step's metrics line (TRL's names computed from the step's own rollout and update) on the tiny model.
(algo=sft's trainer type: test_config_in_trainer.py; run-folder safety and resume: test_run_safety.py.)"""

from __future__ import annotations

import logging
import statistics

import pytest
import torch

import rlvr.train.setup as train_setup
from rlvr.config import build_config
from rlvr.train.trainer import StepResult, Trainer

from .conftest import tiny_overrides


@pytest.fixture
def make_trainer(tmp_path, lowercase_reward):
    made = []

    def make(**extra):
        options = dict(reward_funcs=[lowercase_reward], prompts_per_step=2, num_generations=3,
                       max_completion_length=8, max_steps=3, learning_rate=2e-4)
        made.append(Trainer(build_config(tiny_overrides(tmp_path / f"run{len(made)}", **{**options, **extra}))))
        return made[-1]

    yield make
    for trainer in made:
        trainer.rewarder.close()
        trainer.lock.release()


def test_trainer_builds_its_phases_from_the_config(make_trainer):
    """The plan holds the configured batch and budget; the run's length, the optimiser's rate over the policy's
    trainable weights, the eval-mode policy, a frozen reference equal to it (β > 0), the reward names and the
    run length the reward functions see all follow the config."""
    trainer = make_trainer(beta=0.04)
    assert type(trainer) is Trainer
    rollout = trainer.plan.rollout
    assert (rollout.prompts_per_step, rollout.responses_per_prompt, rollout.max_completion_length) == (2, 3, 8)
    assert trainer.plan.update.needs_reference and trainer.plan.update.loss.beta == 0.04
    assert trainer.max_steps == trainer.length.steps == 3 and trainer.length.optimizer_steps == 3
    assert trainer.length.steps_per_epoch == 64 // 2  # rg:basic_arithmetic:size=64, two prompts a step
    assert trainer.optimizer.param_groups[0]["lr"] == trainer.scheduler.get_last_lr()[0] == 2e-4
    trainable = [p for p in trainer.policy.parameters() if p.requires_grad]
    assert len(trainer.optimizer.param_groups[0]["params"]) == len(trainable) > 0
    assert not trainer.policy.training
    assert trainer.ref_model is not trainer.policy and not any(p.requires_grad for p in trainer.ref_model.parameters())
    for mine, reference in zip(trainer.policy.parameters(), trainer.ref_model.parameters()):
        assert torch.equal(mine, reference)
    assert trainer.rewarder.names == ["lowercase_frac"] and trainer.rewarder.state.max_steps == 3
    assert trainer.evaluation is None and trainer.dagrpo is None
    assert make_trainer().ref_model is None  # β = 0: no reference model


def test_one_step_s_trl_metrics_come_from_its_rollout_and_update(make_trainer):
    """After one step: num_tokens counts the prompt and completion tokens of every generated response (and keeps
    counting), epoch = step / steps per epoch, step_time = the step's seconds per optimiser step, and TRL's loss,
    grad_norm, reward and length equal rlvr's own; the first update's KL to the (identical) reference is 0; the
    samples carry advantages; the weights moved."""
    trainer = make_trainer(beta=0.04, num_completions_to_log=4)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    result = trainer.training_step(1)
    assert isinstance(result, StepResult) and result.update is not None
    m = result.metrics
    groups = [g.policy_samples for g in result.rollout.generated]
    assert len(groups) == 2 and all(len(g.completions) == 3 for g in groups)
    tokens = sum(len(g.generation_prompt(i)) + len(g.completions[i].token_ids) for g in groups for i in g.on_policy)
    assert m["step"] == 1 and m["num_tokens"] == tokens == trainer.step_log.num_tokens
    assert m["epoch"] == pytest.approx(1 / 32)
    steps = result.update.optimizer_steps + result.update.skipped_steps
    assert steps == 1 and m["step_time"] == pytest.approx(m["time/step_s"] / steps)
    assert (m["loss"], m["grad_norm"], m["learning_rate"]) == (m["train/loss"], m["train/grad_norm"], 2e-4)
    assert m["reward"] == pytest.approx(m["rollout/reward_mean"])
    assert m["completions/mean_length"] == pytest.approx(m["rollout/response_len_mean"])
    assert m["train/kl"] == pytest.approx(0.0, abs=1e-6) and m["kl"] == pytest.approx(0.0, abs=1e-6)
    assert len(result.samples) == 4 and all(s["advantage"] is not None for s in result.samples)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))
    second = trainer.training_step(2)
    more = sum(len(g.generation_prompt(i)) + len(g.completions[i].token_ids)
               for g in (g.policy_samples for g in second.rollout.generated) for i in g.on_policy)
    assert second.metrics["num_tokens"] == tokens + more and second.metrics["epoch"] == pytest.approx(2 / 32)


def test_samples_carry_the_group_normalised_rewards_of_the_step(make_trainer):
    """With every response logged (6 of 6: stride 1), each sample's advantage is (r − its group's mean) / (unbiased
    std + ε) over its group's three rewards, 0 for a uniform group, in group order."""
    trainer = make_trainer(num_completions_to_log=6)
    result = trainer.training_step(1)
    eps = trainer.plan.advantages.settings.eps
    expected = []
    for group in result.rollout.kept:
        mean, std = statistics.fmean(group.rewards), statistics.stdev(group.rewards)
        expected += [0.0 if std == 0 else (r - mean) / (std + eps) for r in group.rewards]
    assert [s["reward"] for s in result.samples] == [r for g in result.rollout.kept for r in g.rewards]
    assert [s["advantage"] for s in result.samples] == pytest.approx(expected, abs=1e-5)
    assert any(a != 0 for a in expected)  # (the lowercase reward varies across tiny-random's responses)


def test_start_up_logs_the_step_s_batch_as_trl_counts_it(make_trainer, caplog):
    """Rank 0's start-up line gives prompts × completions, processes, micro-batch, optimiser steps and run length."""
    with caplog.at_level(logging.INFO, logger="rlvr.train.trainer"):
        make_trainer(max_steps=5)
    assert ("each step: 2 prompts x 3 completions on 1 process(es), micro-batches of 6, 1 per optimiser step, "
            "1 optimiser step(s) per step; 5 steps (32 per epoch of 64 prompts)") in caplog.text


def test_config_checks_fail_before_the_model_loads_and_free_the_folder(tmp_path, monkeypatch):
    """A reward function needing a column the data lacks, or schedule arguments the schedule does not take, stop
    Trainer(cfg) before any model is loaded, and the run folder's lock is released (the same folder can be
    tried again at once)."""

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the config checks")

    def needs_level(prompts, completions, level, **kwargs):
        return [0.0] * len(completions)

    monkeypatch.setattr(train_setup, "load_policy", never)  # (the trainer loads the policy in setup.build_models)
    out = tmp_path / "r"
    for _ in range(2):  # the second try meets no lock left by the first
        with pytest.raises(ValueError, match=r"reward function needs_level needs the dataset column\(s\) \['level'\]"):
            Trainer(build_config(tiny_overrides(out, reward_funcs=[needs_level])))
    with pytest.raises(ValueError, match="lr_scheduler_type=cosine_with_min_lr"):
        Trainer(build_config(tiny_overrides(out, lr_scheduler_type="cosine_with_min_lr")))
