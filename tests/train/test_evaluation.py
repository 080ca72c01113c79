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
