"""save_strategy, save_steps and metric_for_best_model as transformers reads them (run_plan.SavePlan, the config's
checks), and save_strategy=best in a run: a checkpoint when an evaluation improves the metric, transformers'
best_* fields in its trainer_state.json, refused where it could never save."""

import json

import pytest

from rlvr.config import build_config
from rlvr.train.plan import RunLength
from rlvr.train.run_plan import SavePlan, best_metric_key
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

LENGTH = RunLength(steps=10, steps_per_epoch=4, optimizer_steps_per_step=1, optimizer_steps=10)


def _due(plan: SavePlan, length: RunLength = LENGTH) -> list[int]:
    return [step for step in range(1, length.steps + 1) if plan.due(length, step)]


@pytest.mark.parametrize(("strategy", "save_steps", "expected"), [
    ("steps", 3, [3, 6, 9, 10]),  # every save_steps, and the end (transformers' DefaultFlowCallback)
    ("steps", 0.25, [3, 6, 9, 10]),  # a fraction of max_steps: ceil(10 * 0.25) = 3 (TrainerState.compute_steps)
    ("steps", 0, [10]),  # rlvr's 0: only the end
    ("epoch", 3, [4, 8, 10]),  # each epoch's end, and the end of training (on_epoch_end when training stops)
    ("no", 3, []),
    ("best", 3, []),  # only when an evaluation improves the metric (best_value)
])
def test_when_a_checkpoint_is_due(strategy, save_steps, expected):
    assert _due(SavePlan(strategy, save_steps, keep_last=None, merged_model=False)) == expected


def test_a_fraction_counts_optimiser_steps_for_a_trl_config():
    """preset=trl counts optimiser steps: 2 a step, 8 in all, save_steps 0.5 = 4 optimiser steps = every 2nd step."""
    length = RunLength(steps=4, steps_per_epoch=4, optimizer_steps_per_step=2, optimizer_steps=8,
                       counts_optimizer_steps=True)
    plan = SavePlan("steps", 0.5, keep_last=None, merged_model=False)
    assert plan.every(length) == 4 and _due(plan, length) == [2, 4]


def test_the_best_metric_is_read_from_the_evaluated_steps():
    plan = SavePlan("best", 0, keep_last=None, merged_model=False, best_metric="eval/reward", greater_is_better=False)
    assert plan.best_value({"reward": 3.0}) is None  # no evaluation in this step
    assert plan.best_value({"eval/reward": 0.5, "eval/loss": 1.0}) == 0.5
    with pytest.raises(ValueError, match=r"metric_for_best_model=reward is not among the evaluation's metrics \(loss\)"):
        plan.best_value({"eval/loss": 1.0})
    assert plan.improves(0.4, 0.5) and not plan.improves(0.5, 0.5) and plan.improves(9.0, None)
    assert [best_metric_key(n) for n in ("reward", "eval_reward", "eval/gsm8k/pass@1")] == [
        "eval/reward", "eval/reward", "eval/gsm8k/pass@1"]


@pytest.mark.parametrize(("options", "message"), [
    (dict(save_strategy="best"), "metric_for_best_model=None: save_strategy=best saves when an evaluation improves"),
    (dict(metric_for_best_model="reward"), "rlvr reads it only with save_strategy=best"),
    (dict(greater_is_better=False), "rlvr reads it only with save_strategy=best"),
    (dict(save_steps=2.5), "save_steps=2.5: use 0 (save at the end), a whole number of steps, or a fraction"),
    (dict(save_strategy="sometimes"), "save_strategy='sometimes': choose one of ('steps', 'epoch', 'best', 'no')"),
])
def test_bad_save_options_are_refused_with_the_fix(tmp_path, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_config(tiny_overrides(tmp_path / "r", **options))


def test_save_strategy_best_without_evaluation_is_refused_before_training(tmp_path):
    trainer = Trainer(build_config(tiny_overrides(tmp_path / "r", save_strategy="best", metric_for_best_model="x")))
    with pytest.raises(ValueError, match="this run evaluates nothing during training: set eval_strategy=steps"):
        trainer.train()
    assert not list((tmp_path / "r").glob("checkpoint-*"))


def test_save_strategy_best_saves_when_the_evaluation_improves(tmp_path):
    """The tiny random model's pass@2 (greater is better) is 0 at every evaluation: the first evaluation is the best
    so far (nothing before it), the equal ones after it are not (transformers compares strictly)."""
    out, data = tmp_path / "r", "rg:chain_sum:size=4:seed=7"
    cfg = build_config(tiny_overrides(out, max_steps=3, eval_steps=1, eval_data=[data], eval_n=2, eval_k=[2],
                                      save_strategy="best", metric_for_best_model=f"{data}/pass@2"))
    Trainer(cfg).train()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line[f"eval/{data}/pass@2"] for line in lines] == [0.0, 0.0, 0.0]
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert (state["best_metric"], state["best_global_step"]) == (0.0, 1)
    assert state["best_model_checkpoint"] == str(out / "checkpoint-1")
    assert (out / "model.safetensors").is_file()  # rlvr train's final model, written from the policy


def test_an_evaluation_without_the_metric_stops_the_run_naming_the_ones_it_has(tmp_path):
    data = "rg:chain_sum:size=4:seed=7"
    cfg = build_config(tiny_overrides(tmp_path / "r", max_steps=2, eval_steps=1, eval_data=[data], eval_n=2,
                                      eval_k=[2], save_strategy="best", metric_for_best_model="accuracy"))
    with pytest.raises(ValueError, match=rf"metric_for_best_model=accuracy is not among the evaluation's metrics "
                                         rf"\({data}/pass@2\): name one of them"):
        Trainer(cfg).train()
