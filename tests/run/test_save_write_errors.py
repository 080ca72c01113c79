"""Every write failure during a save is one line naming the checkpoint, the cause and the fix; the partial
folder goes, earlier checkpoints stay (issue 41, point 4)."""

import errno
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from rlvr.run import checkpoints as ckpt
from rlvr.run import write_errors
from rlvr.run.checkpoint_files import list_checkpoints

from .cli_runs import ENV, last_line, reward_file, train_command


def _save(output_dir: Path, step: int):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    tokenizer = type("Tok", (), {"save_pretrained": lambda self, path: None})()
    model.save_pretrained = lambda path, **kw: (Path(path) / "model.safetensors").write_bytes(b"w")
    return ckpt.save_checkpoint(output_dir, step, ckpt.Snapshot(model, tokenizer, optimizer, scheduler,
                                                                trainer_state={"step": step}), keep_last=2)


def _fails_with(error):
    def save(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"half")  # a partial file, as a failed write leaves
        raise error
    return save


@pytest.mark.parametrize(("code", "cause", "fix"), [
    (errno.ENOSPC, "no space left on device", "save_total_limit=2"),
    (errno.EDQUOT, "disk quota exceeded", "quota"),
    (errno.EFBIG, "a file grew past the largest file allowed", "ulimit -f unlimited"),
    (errno.EIO, "input/output error", "dmesg"),
    (errno.EROFS, "the file system became read-only", "writable disk"),
])
def test_an_oserror_while_saving_is_one_line_and_the_earlier_checkpoint_stays(tmp_path, monkeypatch, code, cause, fix):
    _save(tmp_path, 1)
    before = _files(tmp_path / "checkpoint-1")
    monkeypatch.setattr(ckpt.torch, "save", _fails_with(OSError(code, os.strerror(code))))
    with pytest.raises(OSError) as info:
        _save(tmp_path, 2)
    message = str(info.value)
    assert info.value.errno == code and "\n" not in message
    assert message.startswith(f"[Errno {code}] {cause}") and f"checkpoint checkpoint-2 in {tmp_path}" in message
    assert fix in message and "earlier checkpoints are intact" in message and message.endswith("resume=true")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-1"]  # the partial .tmp-checkpoint-2 is gone
    assert _files(tmp_path / "checkpoint-1") == before


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize(("error", "limited", "code"), [
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"), True, errno.EFBIG),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"), False, 0),
    (RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"), True, errno.EFBIG),
    (Exception("Error while serializing: IoError(Os { code: 5, kind: Uncategorized, message: \"Input/output error\" "
               "}) (os error 5)"), False, errno.EIO),
    (RuntimeError("failed").with_traceback(None), False, None),
])
def test_torch_and_safetensors_write_errors_are_told_by_their_cause(tmp_path, monkeypatch, error, limited, code):
    """torch.save under `ulimit -f` raised RuntimeError "unexpected pos" with a full traceback (rc 1)."""
    limit = 500 * 1024 if limited else resource.RLIM_INFINITY
    monkeypatch.setattr(write_errors.resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    assert write_errors.write_errno(error, tmp_path) == code


def test_a_wrapped_oserror_keeps_its_errno(tmp_path):
    try:
        try:
            raise OSError(errno.EIO, "Input/output error")
        except OSError as inner:
            raise RuntimeError("save failed") from inner
    except RuntimeError as outer:
        assert write_errors.write_errno(outer, tmp_path) == errno.EIO
    assert write_errors.write_errno(KeyboardInterrupt(), tmp_path) is None  # a second Ctrl-C: not the disk


def test_a_failure_at_the_first_checkpoint_says_how_to_start_over(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt.torch, "save", _fails_with(OSError(errno.EFBIG, "File too large")))
    with pytest.raises(OSError, match="no checkpoint was written before it.*overwrite_output_dir=true") as info:
        _save(tmp_path, 1)
    assert "resume=true" not in str(info.value) and list(tmp_path.iterdir()) == []


def _file_size_limit(limit: int):
    def limit_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write gets EFBIG instead of the process dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_files


def test_a_real_file_size_limit_stops_the_cli_in_one_line_and_resume_works(tmp_path):
    """`ulimit -f 500` during a checkpoint: a full torch traceback and rc 1 before."""
    run, reward = tmp_path / "run", reward_file(tmp_path)
    first = subprocess.run(train_command(run, reward, "max_steps=1"), check=False, env=ENV, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    limited = subprocess.run(train_command(run, reward, "max_steps=2", "resume=true"), check=False, env=ENV, capture_output=True,
                             text=True, timeout=300, preexec_fn=_file_size_limit(500 * 1024))
    line = last_line(limited.stderr)
    assert limited.returncode == 2 and "Traceback" not in limited.stderr, limited.stderr[-3000:]
    assert line.startswith(f"rlvr train: [Errno {errno.EFBIG}] a file grew past the largest file allowed")
    assert f"while saving checkpoint checkpoint-2 in {run}" in line and "ulimit -f unlimited" in line
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint-1"] and not list(run.glob(".tmp-*"))
    done = subprocess.run(train_command(run, reward, "max_steps=2", "resume=true"), check=False, env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint-1", "checkpoint-2"]
