"""Signals end a run with 128 + the signal, and with advice that is true in every state (issue 41, point 2)."""

import os
import signal
import subprocess
import time
from pathlib import Path

from rlvr.run.checkpoint_files import list_checkpoints
from rlvr.run.stopping import TrainingInterrupted, stopped_at_once_advice

from .cli_runs import ENV, last_line, reward_file, train_command, wait_for_step


def test_sighup_finishes_the_step_saves_and_exits_129_and_resume_continues(tmp_path):
    """Closing an ssh terminal sends SIGHUP: it killed the run at once (rc 129, no checkpoint)."""
    run, reward = tmp_path / "run", reward_file(tmp_path)
    proc = subprocess.Popen(train_command(run, reward, "max_steps=500"), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for_step(run, 1, proc)
    proc.send_signal(signal.SIGHUP)  # to `rlvr train` alone (kill -HUP PID): passed on to the training
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 129, err[-2000:]
    assert "Traceback" not in err
    assert "interrupted by SIGHUP after step" in last_line(err) and "resume=true" in last_line(err)
    saved = list_checkpoints(run)
    assert saved, "SIGHUP saved nothing"
    done = subprocess.run(train_command(run, reward, f"max_steps={int(saved[-1].name.split('-')[1]) + 1}",
                                        "resume=true"), check=False, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_second_sigterm_before_any_checkpoint_exits_143_and_its_advice_works(tmp_path):
    """It exited 130 and advised resume=true, which was then refused (metrics, no checkpoint)."""
    run, reward = tmp_path / "run", reward_file(tmp_path)
    proc = subprocess.Popen(train_command(run, reward, "max_steps=500", "max_completion_length=64"), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_step(run, 1, proc)
    os.killpg(proc.pid, signal.SIGTERM)  # to every process of the job, as SLURM does: each gets it once
    time.sleep(0.05)  # well inside the step under way
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-2000:]
    line = last_line(err)
    assert line.startswith("rlvr train: interrupted by SIGTERM; no checkpoint was written yet") and "Traceback" not in err
    assert "overwrite_output_dir=true" in line and "resume=true" not in line
    assert not list_checkpoints(run)
    again = subprocess.run(train_command(run, reward, "max_steps=1", "overwrite_output_dir=true"), check=False, env=ENV,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]


def test_the_advice_after_stopping_at_once_is_true_in_every_state(tmp_path):
    assert stopped_at_once_advice(None) == "nothing was trained yet: run the same command again"
    assert "overwrite_output_dir=true" in stopped_at_once_advice(tmp_path)
    (tmp_path / "checkpoint-3").mkdir()
    assert "resume=true" in stopped_at_once_advice(tmp_path)
    assert "overwrite_output_dir" not in stopped_at_once_advice(tmp_path)


def test_an_interruption_with_nothing_saved_does_not_advise_resume():
    error = TrainingInterrupted(signal.SIGHUP, 4, None, Path("runs/r"))
    assert error.exit_code == 129
    assert "resume=true" not in str(error) and "overwrite_output_dir=true" in str(error)
    assert "resume=true" in str(TrainingInterrupted(signal.SIGTERM, 4, Path("runs/r/checkpoint-4"), Path("runs/r")))
