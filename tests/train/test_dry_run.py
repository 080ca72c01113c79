"""`rlvr train --dry-run` resolves what a run would fail on minutes later — the data, every reward function and
the columns it needs, the batch and the run's length — before any model loads; and TRL's save_strategy."""

import json

import pytest

from rlvr.cli import main
from rlvr.config import build_config
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides


def _rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_the_dry_run_reports_the_data_rewards_and_batch(tmp_path, capsys):
    data = _rows(tmp_path / "d.jsonl", [{"problem": f"{i} + 1?", "solution": f"$\\boxed{{{i + 1}}}$"} for i in range(9)])
    code = main(["train", "--dry-run", "--model_name_or_path", "no/such-model", "--dataset_name", data,
                 "--reward_funcs", "accuracy_reward", "tag_count", "--per_device_train_batch_size", "4",
                 "--num_generations", "2", "--num_train_epochs", "2"])
    err = capsys.readouterr().err
    assert code == 0  # the model is never loaded: a name that does not exist is no problem yet
    assert "# data: 9 rows of" in err and "prompts are plain strings" in err
    assert "# reward functions: accuracy_reward, tag_count_reward" in err
    assert "each step: 2 prompts x 2 completions" in err and "8 steps (4 per epoch)" in err  # 2 epochs of 9 // 2


@pytest.mark.parametrize(("extra", "message"), [
    (["--reward_funcs", "no_such_reward"], "unknown reward 'no_such_reward'"),
    (["--reward_funcs", "accuracy"], "needs the dataset column(s) ['solution']"),  # open-r1's accuracy
    (["--dataset_prompt_column", "question"], "dataset_prompt_column='question' is not one of its columns"),
])
def test_the_dry_run_stops_on_what_the_run_would_stop_on(tmp_path, capsys, extra, message):
    data = _rows(tmp_path / "d.jsonl", [{"prompt": "1 + 1?", "answer": "2"}])
    code = main(["train", "--dry-run", "--model_name_or_path", "no/such-model", "--dataset_name", data, *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert len([line for line in err.splitlines() if line.startswith("rlvr train:")]) == 1


@pytest.mark.parametrize(("strategy", "max_steps", "checkpoints"), [
    ("no", 4, []), ("epoch", 4, [2, 4]), ("epoch", 3, [2, 3]), ("steps", 4, [3, 4])])
def test_save_strategy_is_trls(tmp_path, strategy, max_steps, checkpoints):
    """transformers' rules: steps: every save_steps and the last step; epoch: at each epoch's end and at the end of
    training (transformers' on_epoch_end fires when training stops mid-epoch); no: none. rlvr train still puts the
    final model at output_dir (written from the policy when the last step saved no checkpoint)."""
    out = tmp_path / "run"
    cfg = build_config(tiny_overrides(out, data="rg:basic_arithmetic:size=4", max_steps=max_steps, prompts_per_step=2,
                                      save_strategy=strategy, save_steps=3, save_total_limit=None))
    Trainer(cfg).train()
    assert sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == checkpoints
    assert (out / "model.safetensors").is_file() and (out / "training_args.bin").is_file()


def test_training_refuses_an_unknown_reward_before_loading_the_model(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "run", model="no/such-model", reward_funcs=["nope"]))
    with pytest.raises(ValueError, match="unknown reward 'nope'"):  # not "could not load 'no/such-model'"
        Trainer(cfg)


def test_bad_scheduler_arguments_are_refused_before_the_model_loads(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "run", model="no/such-model", lr_scheduler_type="cosine_with_min_lr",
                                      lr_scheduler_kwargs={"min_lr_ratio": 0.1}))
    with pytest.raises(ValueError, match="lr_scheduler_type=cosine_with_min_lr with lr_scheduler_kwargs"):
        Trainer(cfg)
