"""A TRL recipe whose dataset_name is a local folder with train and test splits trains on train and evaluates
on test, as TRL's script would (load_dataset(folder)[dataset_train_split] / [dataset_test_split])."""

import json

import datasets

from rlvr.config import build_config
from rlvr.train.trainer import Trainer

TRAIN = [f"train question {i}: what is {i}+1?" for i in range(4)]
TEST = [f"test question {i}: what is {i}+2?" for i in range(3)]


def _jsonl(path, prompts, offset, name):
    """Rows with their own ids (``train-0``, ``test-0``...), so an id read back says which split it came from."""
    path.write_text("".join(json.dumps({"id": f"{name}-{i}", "prompt": p, "answer": str(i + offset)}) + "\n"
                            for i, p in enumerate(prompts)), encoding="utf-8")


def test_a_folder_trains_on_its_train_split_and_evaluates_on_its_test_split(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")
    folder = tmp_path / "data"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", TRAIN, 1, "train")
    _jsonl(folder / "test.jsonl", TEST, 2, "test")
    run = tmp_path / "run"
    cfg = build_config({
        "model_name_or_path": "tiny-random", "dataset_name": str(folder), "dataset_train_split": "train",
        "dataset_test_split": "test", "eval_strategy": "steps", "eval_steps": 1, "max_steps": 2,
        "per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 8, "log_completions": True,
        "eval_mode": "passk", "eval_n": 1, "eval_k": [1], "output_dir": str(run), "progress_bar": False, "verifier_workers": 1,
    })
    Trainer(cfg).train()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    # 2 steps x 2 prompts: one epoch of the 4 train rows, and nothing else
    assert sorted({s["prompt"] for s in samples}) == sorted(TRAIN)
    assert {s["id"] for s in samples} == {f"train-{i}" for i in range(4)}
    for step in (1, 2):
        lines = (run / "eval" / f"step-{step:06d}.json.problems.jsonl").read_text().splitlines()
        problems = [json.loads(line) for line in lines[1:]]  # the first line is the settings
        assert {p["id"] for p in problems} == {f"test-{i}" for i in range(3)}
        summary = json.loads((run / "eval" / f"step-{step:06d}.json").read_text())["datasets"]
        assert list(summary) == [f"{folder}:split=test"] and summary[f"{folder}:split=test"]["num_problems"] == 3
