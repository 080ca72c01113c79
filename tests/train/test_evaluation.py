"""Evaluation during training: eval/ metrics every eval_steps and at the end, files in the run dir."""

import json

from rlvr.config import build_config
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides


def test_eval_metrics_and_files(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "r", max_steps=3, eval_steps=2, eval_data=["rg:chain_sum:size=4:seed=7"],
                                      eval_n=2, eval_k=[1, 2]))
    history = Trainer(cfg).train()
    keys = [sorted(k for k in m if k.startswith("eval/")) for m in history]
    assert keys[0] == []  # step 1: no evaluation
    assert keys[1] == keys[2] == ["eval/rg:chain_sum:size=4:seed=7/pass@1", "eval/rg:chain_sum:size=4:seed=7/pass@2"]
    for step in (2, 3):  # every 2 steps, and at the end
        saved = json.loads((tmp_path / "r" / "eval" / f"step-{step:06d}.json").read_text())
        summary = saved["datasets"]["rg:chain_sum:size=4:seed=7"]
        assert summary["num_problems"] == 4
        assert history[step - 1]["eval/rg:chain_sum:size=4:seed=7/pass@2"] == summary["pass@k"]["2"]


def test_eval_data_that_repeats_training_prompts_is_flagged(tmp_path, caplog):
    from rlvr.data import load_rows
    from rlvr.train.evaluation import training_overlap

    train = load_rows("rg:chain_sum:size=64:seed=0")
    # reasoning-gym seeds item i with seed + i: seed=8 is the seed=0 list shifted by 8
    assert training_overlap(train, ["rg:chain_sum:size=16:seed=8"], limit=None) == {"rg:chain_sum:size=16:seed=8": 16}
    assert "16 of its 16 problems are training prompts" in caplog.text
    caplog.clear()
    far = "rg:chain_sum:size=16:seed=1000000"
    assert training_overlap(train, [far], limit=None)[far] < 16  # only chance repeats of small sums


def test_eval_on_start_evaluates_before_the_first_step(tmp_path):
    """eval_on_start (TRL's name): pass@k of the initial policy (RUN/eval/step-000000.json) before step 1, with
    eval_strategy=no none during training; the same option the Python API's TRL evaluation takes."""
    spec = "rg:chain_sum:size=2:seed=7"
    cfg = build_config(tiny_overrides(tmp_path / "r", max_steps=2, eval_strategy="no", eval_on_start=True,
                                      eval_data=[spec], eval_n=2, eval_k=[1, 2]))
    history = Trainer(cfg).train()
    assert sorted(p.name for p in (tmp_path / "r" / "eval").glob("step-*.json")) == ["step-000000.json"]
    saved = json.loads((tmp_path / "r" / "eval" / "step-000000.json").read_text())
    assert saved["datasets"][spec]["num_problems"] == 2 and "(step 0)" in saved["model"]
    assert not any(key.startswith("eval/") for line in history for key in line)


def test_the_schedule_counts_trls_optimiser_steps():
    """TRL-shaped runs count optimiser steps (2 a step here): eval_steps=3 falls inside steps 2 (optimiser steps 3-4)
    and 3 (5-6); rlvr evaluates at the end of the step holding it. The last step always (transformers' rule), an
    epoch's end with eval_strategy=epoch, nothing before eval_delay."""
    from rlvr.train.eval_schedule import EvalSchedule, eval_every
    from rlvr.train.plan import RunLength

    length = RunLength(steps=4, steps_per_epoch=2, optimizer_steps_per_step=2, optimizer_steps=8,
                       counts_optimizer_steps=True)
    due = lambda schedule: [step for step in range(1, 5) if schedule.due(length, step)]
    assert due(EvalSchedule("steps", every=3)) == [2, 3, 4]  # 3 and 6 reached in steps 2 and 3; 4: the last
    assert due(EvalSchedule("steps", every=3, delay=4)) == [3, 4]  # 3 < 4: not evaluated
    assert due(EvalSchedule("epoch")) == [2, 4] and due(EvalSchedule("epoch", delay=1.5)) == [4]
    assert due(EvalSchedule("no", on_start=True)) == [] and eval_every(0.3, 8) == 3 and eval_every(5.0, 8) == 5


def test_evaluations_join_the_log_history_after_their_steps_line():
    from rlvr.train.checkpointing import merge_evaluations

    history = [{"loss": 1, "step": 1}, {"loss": 2, "step": 2}]
    made = [{"step": 0, "log": {"eval_loss": 0}}, {"step": 2, "log": {"eval_loss": 2}},
            {"step": 1, "log": {"eval_loss": 1}}, {"step": 2, "log": {"eval_loss": 3}}]
    merged = merge_evaluations(history, [1, 2], made)
    assert merged == [{"eval_loss": 0}, history[0], {"eval_loss": 1}, history[1], {"eval_loss": 2}, {"eval_loss": 3}]
