"""The TRL API's surface (``rlvr.GRPOTrainer``: its arguments, ``train(resume_from_checkpoint=...)``, ``evaluate``,
``save_model``, ``add_callback``, and the GRPOConfig evaluation keys it reads itself) has effects a test sees, in
process on the tiny random model: each form of an argument is asserted by what it does (steps run, global_step,
the weights loaded). docs/from_trl.md is the spec; docs/design/option_tests.md the map."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from rlvr import GRPOConfig, GRPOTrainer
from rlvr.train.plan import RunLength
from rlvr.trl_api.evaluation import eval_options

ROWS = [{"prompt": f"Question {i}: what is {i} + 1?"} for i in range(12)]
EVAL_ROWS = [{"prompt": f"Eval {i}: what is {i} + 2?"} for i in range(2)]
OTHER_ROWS = [{"prompt": f"Other {i}: what is {i} + 3?"} for i in range(2)]

prompts_seen: list[list[str]] = []  # the prompts of each reward call (one call per step, or per evaluation batch)


def reward(prompts, completions, **kwargs):
    prompts_seen.append(list(prompts))
    return [float(len(str(c)) % 3) for c in completions]


def _args(output_dir, max_steps, **extra):
    """B = 1 prompt a step (4 completions, G = 4), a checkpoint every step, a large step so weights move."""
    return GRPOConfig(output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=6, learning_rate=1e-2, logging_steps=1, save_steps=1,
                      report_to="none", seed=3, **extra)


def _trainer(output_dir, max_steps, **kwargs):
    kwargs.setdefault("train_dataset", ROWS)
    prompts_seen.clear()
    return GRPOTrainer(model="tiny-random", reward_funcs=reward, args=_args(output_dir, max_steps), **kwargs)


def _weights(path):
    return load_file(str(path / "model.safetensors"))


def _equal(model, weights) -> bool:
    state = model.state_dict()
    return set(weights) <= set(state) and all(torch.equal(state[k], v) for k, v in weights.items())


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """A finished 2-step run: checkpoint-1 and checkpoint-2 in its output_dir, with different weights."""
    out = tmp_path_factory.mktemp("trl_api") / "run"
    _trainer(out, 2).train()
    assert not _equal_weights(_weights(out / "checkpoint-1"), _weights(out / "checkpoint-2"))
    return out


def _equal_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def run(two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    return out


# ----------------------------------------------------------------------------- train(resume_from_checkpoint=...)

@pytest.mark.parametrize(("form", "max_steps", "steps_run", "weights_of"), [
    (True, 2, 0, "checkpoint-2"),  # the newest checkpoint: nothing left to run, its weights
    (True, 3, 1, None),  # the newest: step 3 only
    ("checkpoint-1", 1, 0, "checkpoint-1"),  # that checkpoint (not the newest): its weights
    ("checkpoint-1", 2, 1, "checkpoint-2"),  # from step 1: step 2 again, to the uninterrupted run's weights
])
def test_resume_from_checkpoint_true_or_a_path(two_steps, run, form, max_steps, steps_run, weights_of):
    """(The weights are compared with the first run's checkpoints, in ``two_steps``: resuming rewrites ``run``'s.)"""
    trainer = _trainer(run, max_steps)
    output = trainer.train(resume_from_checkpoint=form if form is True else str(run / form))
    assert output.global_step == trainer.state.global_step == max_steps
    assert len(prompts_seen) == steps_run, "one reward call a step: the steps this train() ran"
    if weights_of is not None:
        loaded = [name for name in ("checkpoint-1", "checkpoint-2") if _equal(trainer.model, _weights(two_steps / name))]
        assert loaded == [weights_of], f"the trained weights are those of {loaded or 'no checkpoint'}"


@pytest.mark.parametrize("form", [False, None])
def test_resume_from_checkpoint_false_or_none_starts_a_fresh_run(run, tmp_path, form):
    trainer = _trainer(tmp_path / "new", 1)
    assert trainer.train(resume_from_checkpoint=form).global_step == 1 and len(prompts_seen) == 1  # from step 0
    with pytest.raises(ValueError, match="already holds a run; pass resume=true to continue it"):
        _trainer(run, 3).train(resume_from_checkpoint=form)  # a run's folder is neither resumed nor overwritten


def test_resume_after_the_model_was_used_still_resumes(run):
    """``trainer.model`` builds rlvr's trainer (without resuming); ``train(resume_from_checkpoint=...)`` rebuilds it
    (``GRPOTrainer._built``), as TRL's trainer, whose model exists from the constructor on, resumes. (Found by this
    test: the set-up refused the folder holding a run before train() could say it resumes; the TRL API now leaves
    that check to the start of training, ``Outputs.folder_check_first``.)"""
    trainer = _trainer(run, 2)
    assert trainer.model is not None
    trainer.train(resume_from_checkpoint=str(run / "checkpoint-1"))
    assert trainer.state.global_step == 2 and len(prompts_seen) == 1


# ----------------------------------------------------------------------------- save_model, evaluate, add_callback

def test_save_model_writes_the_policy_where_asked_or_at_output_dir(tmp_path):
    trainer = _trainer(tmp_path / "run", 1)
    trainer.train()
    assert not (tmp_path / "run" / "model.safetensors").exists()  # TRL: no model at the top without save_model()
    trainer.save_model(str(tmp_path / "saved"))
    assert _equal(trainer.model, _weights(tmp_path / "saved")) and not (tmp_path / "run" / "model.safetensors").exists()
    trainer.save_model()
    assert _equal(trainer.model, _weights(tmp_path / "run"))


def test_evaluate_its_dataset_prefix_and_ignore_keys(tmp_path):
    trainer = _trainer(tmp_path / "run", 1, eval_dataset=EVAL_ROWS)
    first = trainer.evaluate()  # the trainer's eval_dataset
    assert {p for call in prompts_seen for p in call} == {row["prompt"] for row in EVAL_ROWS}
    assert "eval_loss" in first and "eval_reward" in first
    prompts_seen.clear()
    metrics = trainer.evaluate(eval_dataset=OTHER_ROWS, metric_key_prefix="test")
    assert {p for call in prompts_seen for p in call} == {row["prompt"] for row in OTHER_ROWS}
    # transformers' keys take the prefix; TRL's batch metrics keep TRL's eval_ names (its log() writes them so)
    assert {"test_loss", "test_runtime", "eval_reward"} <= metrics.keys() and "eval_loss" not in metrics
    assert "eval_other_loss" in trainer.evaluate(eval_dataset={"other": OTHER_ROWS})  # a dict: each one's keys
    # ignore_keys concerns model outputs, which TRL's evaluation has none of: the same keys either way
    assert trainer.evaluate(ignore_keys=["eval_loss", "eval_reward"]).keys() == first.keys()


def test_add_callback_and_callbacks_are_called(tmp_path):
    from transformers import TrainerCallback

    events = []

    class Begin(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            events.append("begin")

    class End(TrainerCallback):
        def on_train_end(self, args, state, control, **kwargs):
            events.append(f"end {state.global_step}")

    trainer = _trainer(tmp_path / "run", 1, callbacks=[Begin()])
    trainer.add_callback(End)  # a class: an instance of it is added
    trainer.train()
    assert events == ["begin", "end 1"]
    with pytest.raises(RuntimeError, match="add callbacks before the first train"):
        trainer.add_callback(End())


def test_optimizers_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match=r"GRPOTrainer\(optimizers=...\): rlvr builds the optimiser"):
        _trainer(tmp_path / "run", 1, optimizers=(object(), None))


class Counter:
    """A TRL environment: its method is the tool, ``get_reward`` a reward."""

    def reset(self, **kwargs):
        self.count = 0
        return "Count."

    def increment(self) -> int:
        """Add one.

        Returns:
            The count.
        """
        self.count += 1
        return self.count

    def get_reward(self) -> float:
        return float(self.count)


def test_environment_factory_without_a_train_dataset():
    """TRL's: the environment owns the data (reset() gives the prompt); one generation batch of empty prompts."""
    trainer = GRPOTrainer(model="tiny-random", environment_factory=Counter, args=_args("unused", 2))
    assert trainer.cfg.rollout.environment_factory is not None
    assert trainer.train_dataset == [{"prompt": [{"role": "user", "content": ""}]}]  # B = 1 prompt a step


# ----------------------------------------------------------------------------- the GRPOConfig evaluation keys

LENGTH = RunLength(steps=10, steps_per_epoch=5, optimizer_steps_per_step=1, optimizer_steps=10,
                   counts_optimizer_steps=True)


@pytest.mark.parametrize(("keys", "due", "on_start"), [
    ({}, [], False),  # eval_strategy=no (TRL's default)
    ({"do_eval": True}, [], False),  # read by scripts; TRL's trainer does nothing with it, nor does rlvr's
    ({"eval_strategy": "steps", "eval_steps": 3}, [3, 6, 9, 10], False),  # every 3, and the last step
    ({"eval_strategy": "steps"}, [4, 8, 10], False),  # eval_steps unset: logging_steps (4 here)
    ({"eval_strategy": "steps", "eval_steps": 0.25}, [3, 6, 9, 10], False),  # a fraction of max_steps: ceil(2.5)
    ({"eval_strategy": "steps", "eval_steps": 3, "eval_delay": 5}, [6, 9, 10], False),  # from step 5 on
    ({"eval_strategy": "epoch"}, [5, 10], False),  # each epoch's end
    ({"eval_strategy": "epoch", "eval_delay": 1.5}, [10], False),  # from 1.5 epochs on
    ({"eval_on_start": True}, [], True),
])
def test_eval_strategy_steps_delay_and_on_start(keys, due, on_start):
    trainer = GRPOTrainer(model="tiny-random", reward_funcs=reward, train_dataset=ROWS, eval_dataset=EVAL_ROWS,
                          args=GRPOConfig(output_dir="unused", max_steps=10, logging_steps=4, **keys))
    schedule = trainer._eval.schedule(10)
    assert [step for step in range(1, 11) if schedule.due(LENGTH, step)] == due
    assert schedule.on_start is on_start


@pytest.mark.parametrize(("keys", "generations", "batch"), [
    ({}, 4, 8),  # num_generations_eval: num_generations (4 here); per_device_eval_batch_size 8
    ({"num_generations_eval": 2, "per_device_eval_batch_size": 6}, 2, 6),
])
def test_num_generations_eval_and_per_device_eval_batch_size(keys, generations, batch):
    settings = eval_options(keys, {"num_generations": 4}, has_dataset=True).settings
    assert (settings.num_generations, settings.batch_size) == (generations, batch)
