"""TensorBoard tags: TRL's own GRPOTrainer (report_to tensorboard) beside rlvr's Trainer on the same settings, both
event files read back with TensorBoard's EventAccumulator.

The run of test_trl_training_step.py (tiny float64 model, fixed completions, TRL-named options; one optimiser step
a generation, so that TRL's log lines are rlvr's): every scalar tag TRL writes (``train/<name>``, transformers'
end-of-training ``train/train_runtime`` ...) rlvr writes too, at the same global steps, with the same values
(float32, as TensorBoard stores them; the timings aside); every other tag of rlvr's is under ``rlvr/``, so no rlvr
series sits under a tag of TRL's. tests/run/test_tracker_tags.py does the same for W&B, trackio and MLflow at the
level of their client calls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import test_trl_training_step as step_test
from .test_trl_training_step import FixedCompletions, model_dir, run_rlvr, run_trl  # noqa: F401  (model_dir: a fixture)

pytest.importorskip("tensorboard", reason="tensorboard is in the tensorboard extra (make setup installs it)")

TIMINGS = ("train/step_time", "train/train_runtime", "train/train_samples_per_second", "train/train_steps_per_second")


def scalars(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar of the one event file under ``folder``: tag -> {step: value}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = folder.rglob("events.out.tfevents.*")
    reader = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
    reader.Reload()
    return {tag: {e.step: e.value for e in reader.Scalars(tag)} for tag in reader.Tags()["scalars"]}


def test_rlvr_writes_trls_tensorboard_tags_at_trls_steps(tmp_path, model_dir, monkeypatch):  # noqa: F811
    options = dict(loss_type="dapo", gradient_accumulation_steps=2, max_steps=2, report_to=["tensorboard"])
    monkeypatch.setitem(step_test.TRL_ONLY, "report_to", ["tensorboard"])  # TRL_ONLY's [] would win over options
    rlvr = run_rlvr(tmp_path / "rlvr", model_dir, options, FixedCompletions(False), monkeypatch)
    trl = run_trl(tmp_path / "trl", model_dir, options, FixedCompletions(False), monkeypatch)
    theirs, ours = scalars(tmp_path / "trl" / "runs"), scalars(tmp_path / "rlvr" / "runs")

    assert "train/reward" in theirs and "train/rewards/reward/mean" in theirs and "train/train_loss" in theirs
    assert {tag for tag in ours if not tag.startswith("rlvr/")} == set(theirs)  # TRL's tags, all, and only
    assert {"rlvr/train/loss", "rlvr/train/grad_norm", "rlvr/train/entropy", "rlvr/rollout/reward_mean"} <= set(ours)
    for tag, values in theirs.items():
        assert sorted(ours[tag]) == sorted(values) == ([2] if tag.startswith("train/train") or tag == "train/total_flos"
                                                       else [1, 2]), tag  # global_step
        if tag not in TIMINGS:
            absolute = 1e-6 if tag == "train/loss" or tag == "train/train_loss" else 1e-7
            assert ours[tag] == pytest.approx(values, rel=1e-6, abs=absolute), tag
    assert rlvr.tracker_steps == [line["step"] for line in trl.log_history] == [1, 2]
