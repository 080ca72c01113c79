"""Runs that survive their users: one writer per folder, no overwriting of a foreign folder, resume
that refuses a gap in the logs, damaged checkpoints passed over, Ctrl-C and SIGTERM save the run."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlvr.config import build_config
from rlvr.run.checkpoint_check import checkpoint_problem
from rlvr.run.checkpoint_files import MANIFEST, write_manifest
from rlvr.run.checkpoints import checkpoint_dir, latest_checkpoint, list_checkpoints, load_trainer_state
from rlvr.run.folder import RunFolderBusy, RunFolderLock, new_run_folder
from rlvr.train.trainer import Trainer
from tests.helpers.metrics import comparable
from tests.run.cli_runs import wait_for_step

from .conftest import tiny_overrides


def _cfg(out, reward, **extra):
    return build_config(tiny_overrides(out, reward_funcs=[reward], learning_rate=1e-3, **extra))


def _weights(folder):
    return load_file(next(folder.glob("*.safetensors")))


def _metrics(run):
    return [comparable(json.loads(x))
            for x in (run / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- the run folder
def test_a_second_writer_stops_at_once_naming_the_holder(tmp_path, lowercase_reward):
    holder = RunFolderLock(tmp_path / "r")  # as a running `rlvr train` holds it
    try:
        with pytest.raises(RunFolderBusy, match=rf"in use by rlvr train pid {os.getpid()}"):
            Trainer(_cfg(tmp_path / "r", lowercase_reward, max_steps=1))
    finally:
        holder.release()
    assert not (tmp_path / "r" / "metrics.jsonl").exists()  # nothing was written by the second one
    Trainer(_cfg(tmp_path / "r", lowercase_reward, max_steps=1)).train()  # released: the folder is usable


def test_two_processes_into_one_folder_one_is_refused(tmp_path, lowercase_reward):
    out = tmp_path / "shared"
    command = [sys.executable, "-m", "rlvr.cli", "train", "model=tiny-random", "data=rg:basic_arithmetic:size=16",
               "prompts_per_step=2", "num_generations=2", "max_completion_length=4", "progress_bar=false",
               "verifier_workers=1", f"reward_funcs={lowercase_reward}", f"output_dir={out}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([*command, "seed=1", "max_steps=100000"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out / "metrics.jsonl").exists():
            time.sleep(0.05)
        # the same command, as a parallel sweep would start it (resume=true: the lock, not the
        # "already holds a run" check, is what stops it)
        second = subprocess.run([*command, "seed=2", "max_steps=3", "resume=true"], env=env, capture_output=True,
                                text=True, timeout=300, check=False)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert second.returncode == 2, second.stderr
    assert f"is in use by rlvr train pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    assert "seed: 1" in (out / "config.yaml").read_text()
    steps = [m["step"] for m in _metrics(out)]
    assert steps == list(range(1, len(steps) + 1))  # one run's steps, not interleaved


def test_default_run_folders_are_unique_within_a_second(tmp_path):
    now = datetime(2026, 12, 1, 9, 33, 59)
    names = {new_run_folder("grpo", root=tmp_path, now=now).name for _ in range(3)}
    assert names == {"grpo-20261201-093359", "grpo-20261201-093359-2", "grpo-20261201-093359-3"}


def test_a_folder_that_is_not_a_run_is_never_written_over(tmp_path, lowercase_reward):
    myexp = tmp_path / "myexp"
    myexp.mkdir()
    (myexp / "config.yaml").write_text("# my commented experiment\nlearning_rate: 1e-3\n")
    with pytest.raises(ValueError, match=r"is not empty \(config.yaml\) and is not an rlvr run"):
        Trainer(_cfg(myexp, lowercase_reward, max_steps=1))
    assert (myexp / "config.yaml").read_text().startswith("# my commented experiment")
    assert sorted(p.name for p in myexp.iterdir()) == ["config.yaml"]


def test_resume_true_without_a_checkpoint_does_not_wipe_the_metrics(tmp_path, lowercase_reward):
    out = tmp_path / "r"
    Trainer(_cfg(out, lowercase_reward, max_steps=2)).train()
    for folder in list_checkpoints(out):  # as if it had died before its first save
        import shutil
        shutil.rmtree(folder)
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="no checkpoint to resume from.*overwrite_output_dir=true"):
        Trainer(_cfg(out, lowercase_reward, max_steps=3, resume=True)).train()
    assert (out / "metrics.jsonl").read_text() == before
    history = Trainer(_cfg(out, lowercase_reward, max_steps=2, overwrite_output_dir=True)).train()
    assert [m["step"] for m in history] == [1, 2] and [m["step"] for m in _metrics(out)] == [1, 2]


def test_a_metrics_file_cut_short_is_refused_on_resume(tmp_path, lowercase_reward):
    out = tmp_path / "r"
    Trainer(_cfg(out, lowercase_reward, max_steps=3)).train()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text(lines[0] + "\n")  # lost steps 2 and 3; the checkpoint is at 3
    with pytest.raises(ValueError, match=r"lacks steps 2-3, but the checkpoint is at step 3.*force_resume=true"):
        Trainer(_cfg(out, lowercase_reward, max_steps=4, resume=True)).train()
    history = Trainer(_cfg(out, lowercase_reward, max_steps=4, resume=True, force_resume=True)).train()
    assert [m["step"] for m in history] == [4]


# ----------------------------------------------------------------------------- damaged checkpoints
def _damage_and_resume(tmp_path, lowercase_reward, damage, caplog):
    """3 steps saved every step; damage step 3's checkpoint; resume to 3 from the newest intact one."""
    full, run = tmp_path / "full", tmp_path / "run"
    Trainer(_cfg(full, lowercase_reward, max_steps=3)).train()
    Trainer(_cfg(run, lowercase_reward, max_steps=3, save_steps=1, save_total_limit=None)).train()
    damage(checkpoint_dir(run, 3))
    assert checkpoint_problem(checkpoint_dir(run, 3)) is not None
    with caplog.at_level("WARNING", logger="rlvr.run.resume"):
        Trainer(_cfg(run, lowercase_reward, max_steps=3, save_steps=1, save_total_limit=None, resume=True)).train()
    assert any("checkpoint-3 is damaged" in r.getMessage() and "resuming from checkpoint-2" in r.getMessage()
               for r in caplog.records)
    # step 3 was run again from step 2's checkpoint: the same weights and metrics as an uninterrupted run
    for key, value in _weights(latest_checkpoint(full)).items():
        torch.testing.assert_close(_weights(latest_checkpoint(run))[key], value, rtol=0, atol=0)
    assert _metrics(run) == _metrics(full)


def test_resume_passes_over_a_checkpoint_missing_its_optimizer(tmp_path, lowercase_reward, caplog):
    _damage_and_resume(tmp_path, lowercase_reward, lambda c: (c / "optimizer.pt").unlink(), caplog)


def test_resume_passes_over_a_truncated_weights_file(tmp_path, lowercase_reward, caplog):
    def truncate(folder):
        path = next(folder.glob("*.safetensors"))
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _damage_and_resume(tmp_path, lowercase_reward, truncate, caplog)


def test_resume_passes_over_nan_weights_saved_as_they_were(tmp_path, lowercase_reward, caplog):
    def poison(folder):  # NaN weights written at save time (a bad step), so the manifest agrees with them
        (folder / MANIFEST).unlink()
        path = next(folder.glob("*.safetensors"))
        weights = load_file(path)
        name = next(iter(weights))
        weights[name] = torch.full_like(weights[name], float("nan"))
        save_file(weights, path, metadata={"format": "pt"})
        write_manifest(folder)
    _damage_and_resume(tmp_path, lowercase_reward, poison, caplog)


def test_resume_passes_over_a_checkpoint_without_its_manifest(tmp_path, lowercase_reward, caplog):
    _damage_and_resume(tmp_path, lowercase_reward, lambda c: (c / MANIFEST).unlink(), caplog)


def test_every_checkpoint_damaged_is_refused_with_the_fix(tmp_path, lowercase_reward):
    out = tmp_path / "r"
    Trainer(_cfg(out, lowercase_reward, max_steps=1)).train()
    (checkpoint_dir(out, 1) / "rlvr_state.json").write_text("{")
    with pytest.raises(ValueError, match="every checkpoint .* is damaged.*overwrite_output_dir=true"):
        Trainer(_cfg(out, lowercase_reward, max_steps=2, resume=True)).train()


# ----------------------------------------------------------------------------- signals
def _cli(out, reward, **extra):
    options = tiny_overrides(out, reward_funcs=[reward], learning_rate=1e-3, **extra)
    return [sys.executable, "-m", "rlvr.cli", "train",
            *(f"{k}=[{','.join(v)}]" if isinstance(v, list) else f"{k}={v}" for k, v in options.items())]


ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_finishes_the_step_saves_and_resumes_exactly(tmp_path, lowercase_reward, signum):
    steps = 6
    full, run = tmp_path / "full", tmp_path / "run"
    subprocess.run(_cli(full, lowercase_reward, max_steps=steps), env=ENV, stdout=subprocess.DEVNULL, check=True,
                   timeout=600)
    proc = subprocess.Popen(_cli(run, lowercase_reward, max_steps=steps), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_step(run, 2, proc)
    os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C or SLURM: to the training process at once (a signal to
    # `rlvr train` alone is passed on a quarter second later: tests/run/test_signal_exits.py)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err
    stopped_at = len(_metrics(run))
    assert 2 <= stopped_at < steps
    assert load_trainer_state(latest_checkpoint(run))["step"] == stopped_at  # saved, though save_steps is 50
    assert f"interrupted by {signal.Signals(signum).name} after step {stopped_at}" in err and "resume=true" in err
    subprocess.run([*_cli(run, lowercase_reward, max_steps=steps), "resume=true"], env=ENV,
                   stdout=subprocess.DEVNULL, check=True, timeout=600)
    for key, value in _weights(latest_checkpoint(full)).items():
        torch.testing.assert_close(_weights(latest_checkpoint(run))[key], value, rtol=0, atol=0)
    assert _metrics(run) == _metrics(full)


def test_default_save_steps_bounds_what_a_crash_loses():
    assert build_config({}).run.save_steps == 50


def test_resume_and_overwrite_together_are_refused():
    with pytest.raises(ValueError, match="overwrite_output_dir=True: resume=true continues the run"):
        build_config({"resume": True, "overwrite_output_dir": True})


def test_a_run_from_before_the_marker_is_still_a_run(tmp_path):
    from rlvr.run.folder import check_not_foreign, is_run_folder
    committed = tmp_path / "seed0"  # as the committed study runs: logs and config, no checkpoint, no marker
    committed.mkdir()
    (committed / "metrics.jsonl").write_text('{"step": 1}\n')
    (committed / "config.yaml").write_text("model:\n  model: tiny-random\nrun:\n  seed: 0\n")
    assert is_run_folder(committed)
    check_not_foreign(committed)
    (committed / "config.yaml").write_text("learning_rate: 1e-3\n")  # a user's own flat config: not a run
    assert not is_run_folder(committed)
    with pytest.raises(ValueError, match="is not an rlvr run"):
        check_not_foreign(committed)


def test_a_run_inside_another_run_or_its_checkpoint_is_refused_before_anything_is_written(tmp_path, lowercase_reward):
    """Issue 34: a run written into runs/smoke/checkpoint-1/sub would be deleted by smoke's rotation."""
    outer = tmp_path / "smoke"
    Trainer(build_config(tiny_overrides(outer, reward_funcs=[lowercase_reward], max_steps=1, save_steps=1))).train()
    for inner in (outer / "checkpoint-1" / "sub", outer / "nested"):
        with pytest.raises(ValueError, match=rf"is inside the run folder {outer}.*Choose a folder outside it"):
            Trainer(build_config(tiny_overrides(inner, reward_funcs=[lowercase_reward], max_steps=1)))
        assert not inner.exists()


@pytest.mark.parametrize("planted", ["notes.txt", "sub/.rlvr-run"])
def test_checkpoint_rotation_never_deletes_what_rlvr_did_not_write(tmp_path, lowercase_reward, planted):
    """save_total_limit=1 would delete checkpoint-1; it holds a user's file (or another run's folder): the run
    stops naming it, and nothing is deleted."""
    run = tmp_path / "run"
    options = tiny_overrides(run, reward_funcs=[lowercase_reward], max_steps=1, save_steps=1, save_total_limit=1)
    Trainer(build_config(options)).train()
    (run / "checkpoint-1" / planted).parent.mkdir(parents=True, exist_ok=True)
    (run / "checkpoint-1" / planted).write_text("mine")
    first = planted.split("/")[0] + ("/" if "/" in planted else "")
    with pytest.raises(ValueError, match=rf"save_total_limit=1 would delete .*checkpoint-1, but it holds {first}"):
        Trainer(build_config({**options, "max_steps": 2, "resume": True})).train()
    assert (run / "checkpoint-1" / planted).read_text() == "mine" and (run / "checkpoint-2").is_dir()


CHDIR_REWARD = '''
import os


def wanders(completions, **kwargs):
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    return [float(len(c) % 3) for c in completions]
'''


def test_a_reward_that_changes_the_working_directory_is_named_and_the_run_writes_where_it_began(
        tmp_path, monkeypatch, caplog):
    """Issue 34: the run stopped with "No such file or directory: 'runs/r7/metrics.jsonl'". Output paths are
    absolute from the start; the function is named once and the working directory changed back."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wander.py").write_text(CHDIR_REWARD)
    cfg = build_config(tiny_overrides("runs/r7", reward_funcs=[f"{tmp_path / 'wander.py'}:wanders"], max_steps=2))
    with caplog.at_level("WARNING", logger="rlvr"):
        Trainer(cfg).train()
    assert len((tmp_path / "runs" / "r7" / "metrics.jsonl").read_text().splitlines()) == 2
    assert os.getcwd() == str(tmp_path)
    warnings = [r.getMessage() for r in caplog.records if "changed the working directory" in r.getMessage()]
    assert len(warnings) == 1 and "wanders" in warnings[0] and str(tmp_path / "elsewhere") in warnings[0]
