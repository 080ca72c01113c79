"""Reading run directories and eval files: series skip nulls, step order, names, clear errors."""

import json

import pytest

from rlvr.report.load import load_evals, load_run, load_runs

from .conftest import BASE_EVAL, GRPO_EVAL, GRPO_RECORDS, write_run


def test_series_are_in_step_order_and_skip_nulls(runs):
    grpo = load_run(runs["grpo"])
    assert grpo.name == "grpo" and grpo.algo == "grpo" and grpo.num_steps == 4
    assert grpo.get("rollout/reward_mean").steps == (1, 2, 3, 4)
    assert grpo.get("rollout/reward_mean").values == (0.10, 0.20, 0.40, 0.50)
    assert grpo.get("rollout/reward_std").steps == (1, 3, 4)  # null at step 2
    assert grpo.get("train/kl") is None  # null at every step: no series at all
    dagrpo = load_run(runs["dagrpo"])  # written 2, 1, 3
    assert dagrpo.get("rollout/reward_mean").steps == (1, 2, 3)
    assert dagrpo.get("rollout/reward_mean").values == (0.2, 0.3, 0.35)
    assert dagrpo.get("train/kl").steps == (1, 2)


def test_names_from_option_or_folder(runs):
    assert [r.name for r in load_runs([runs["grpo"], runs["dagrpo"]])] == ["grpo", "dagrpo"]
    assert [r.name for r in load_runs([runs["grpo"], runs["dagrpo"]], ["a", "b"])] == ["a", "b"]
    with pytest.raises(ValueError, match="2 run directories"):
        load_runs([runs["grpo"], runs["dagrpo"]], ["a"])
    with pytest.raises(ValueError, match="--names"):
        load_runs([runs["grpo"], runs["grpo"]])


def test_folder_without_metrics_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no metrics.jsonl"):
        load_run(tmp_path / "empty")
    with pytest.raises(ValueError, match="no such run directory"):
        load_run(tmp_path / "missing")


def test_half_written_last_line_is_skipped_but_a_bad_middle_line_is_an_error(tmp_path):
    run = write_run(tmp_path, "cut", GRPO_RECORDS[:2], None)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 3, "rollout/rew')
    loaded = load_run(run)
    assert loaded.get("rollout/reward_mean").steps == (1, 2)
    assert any("unreadable last line 3" in n for n in loaded.notes)
    assert any("no config.yaml" in n for n in loaded.notes)
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write("\n" + json.dumps(GRPO_RECORDS[3]) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:3"):
        load_run(run)


def test_eval_files_of_a_run_and_extra_files(runs, base_eval, tmp_path):
    loaded = load_runs([runs["grpo"], runs["dagrpo"]])
    evals = load_evals(loaded, [base_eval, runs["grpo"] / "eval" / "final.json"])  # the second is a duplicate
    assert [(e.label, e.run_name) for e in evals] == [("grpo", "grpo"), ("base", None)]
    assert evals[0].datasets["gsm8k-100"]["pass@k"] == {int(k): v for k, v in
                                                         GRPO_EVAL["datasets"]["gsm8k-100"]["pass@k"].items()}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m", "results": {}}))
    with pytest.raises(ValueError, match="needs a 'datasets' object"):
        load_evals(loaded, [bad])


def test_extra_eval_of_a_checkpoint_inside_a_run_belongs_to_that_run(runs, tmp_path):
    result = dict(BASE_EVAL, model=str(runs["dagrpo"] / "checkpoint-3"))
    path = tmp_path / "ckpt3.json"
    path.write_text(json.dumps(result))
    (evaluation,) = load_evals(load_runs([runs["dagrpo"]]), [path])
    assert (evaluation.label, evaluation.run_name) == ("dagrpo", "dagrpo")


def test_a_stray_json_in_a_runs_eval_folder_is_noted_not_fatal(runs):
    (runs["grpo"] / "eval" / "notes.json").write_text('{"todo": 1}')
    loaded = load_runs([runs["grpo"]])
    evals = load_evals(loaded)
    assert [e.path.name for e in evals] == ["final.json"]
    assert any("notes.json" in n and "'datasets'" in n for n in loaded[0].notes)
