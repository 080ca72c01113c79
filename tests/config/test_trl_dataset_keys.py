"""TRL's and open-r1's dataset keys as one `data` spec and the evaluation spec (rlvr.config.trl_names):
dataset_name (a Hub id or a local file or folder), dataset_config, open-r1's older dataset_configs list,
dataset_train_split, dataset_test_split."""

import json

import datasets
import pytest

from rlvr.config import build_config
from rlvr.data import load_rows


def test_a_local_folder_with_its_train_and_test_splits(tmp_path):
    cfg = build_config({"dataset_name": str(tmp_path), "dataset_train_split": "train", "dataset_test_split": "test",
                        "eval_strategy": "steps", "eval_steps": 1})
    assert cfg.data.data == str(tmp_path)
    assert cfg.eval.eval_data == [f"{tmp_path}:split=test"]
    cfg = build_config({"dataset_name": str(tmp_path), "dataset_train_split": "dev", "dataset_config": "default"})
    assert cfg.data.data == f"{tmp_path}:split=dev:config=default"


@pytest.mark.parametrize(("configs", "spec"), [
    (["all"], "openai/gsm8k"),  # open-r1's recipes: its grpo.py never read the key, so the default config loaded
    ("all", "openai/gsm8k"),  # --dataset_configs all on the command line
    (["default"], "openai/gsm8k"),
    ([], "openai/gsm8k"),
    (["main"], "openai/gsm8k:config=main"),  # one name: dataset_config
])
def test_open_r1s_dataset_configs_list(configs, spec):
    cfg = build_config({"dataset_name": "openai/gsm8k", "dataset_configs": configs, "eval_strategy": "steps",
                        "eval_steps": 1})
    assert cfg.data.data == spec
    assert cfg.eval.eval_data == [spec.replace("openai/gsm8k", "openai/gsm8k:split=test")]
    assert cfg.run.preset == "trl"


def test_dataset_configs_that_rlvr_cannot_honour_are_refused():
    with pytest.raises(ValueError, match=r"dataset_configs: \['main', 'socratic'\]: rlvr loads one config .* keep "
                                         "one: dataset_config: NAME"):
        build_config({"dataset_name": "openai/gsm8k", "dataset_configs": ["main", "socratic"]})
    with pytest.raises(ValueError, match=r"dataset_configs: \['main'\] contradicts dataset_config: 'socratic'"):
        build_config({"dataset_name": "openai/gsm8k", "dataset_configs": ["main"], "dataset_config": "socratic"})
    cfg = build_config({"dataset_name": "openai/gsm8k", "dataset_configs": ["all"], "dataset_config": "main"})
    assert cfg.data.data == "openai/gsm8k:config=main"  # open-r1 loaded dataset_config and ignored the list


def test_the_specs_made_from_trl_keys_load_the_named_splits(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")
    folder = tmp_path / "math"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"prompt": "train q", "answer": "1"}) + "\n", encoding="utf-8")
    (folder / "test.jsonl").write_text(json.dumps({"prompt": "test q", "answer": "2"}) + "\n", encoding="utf-8")
    cfg = build_config({"dataset_name": str(folder), "dataset_configs": ["all"], "dataset_config": "default",
                        "eval_strategy": "steps", "eval_steps": 1})
    assert [row["prompt"] for row in load_rows(cfg.data.data)] == ["train q"]
    assert [row["prompt"] for row in load_rows(cfg.eval.eval_data[0])] == ["test q"]
    cfg = build_config({"dataset_name": str(folder), "dataset_test_split": "validation", "eval_strategy": "steps",
                        "eval_steps": 1})
    with pytest.raises(ValueError, match=r"split 'validation' not in .*math \(splits: train, test\)"):
        load_rows(cfg.eval.eval_data[0])
