"""Signals end a run with 128 + the signal, and with advice that is true in every state (issue 41, point 2)."""

import os
import signal
import subprocess
import time
from pathlib import Path

from rlvr.run.checkpoint_files import list_checkpoints
from rlvr.run.stopping import TrainingInterrupted, stopped_at_once_advice

from .cli_runs import ENV, SLOW, last_line, reward_file, train_command, wait_for_step


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
    run, reward = tmp_path / "run", reward_file(tmp_path, SLOW, "slow_lowercase")
    proc = subprocess.Popen(train_command(run, reward, "max_steps=500"), env=ENV,
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


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    run, reward = tmp_path / "run", reward_file(tmp_path, SLOW, "slow_lowercase")
    proc = subprocess.Popen(train_command(run, reward, "max_steps=500"), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_step(run, 1, proc)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: to every process of the terminal's job
    time.sleep(0.05)  # well inside the step under way
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert last_line(err).startswith("rlvr train: interrupted by SIGINT; no checkpoint was written yet: start over")


AT_EXIT = '''
import atexit
import pathlib
import time


def _leaving():
    pathlib.Path(__file__).with_suffix(".leaving").touch()
    time.sleep(60)  # an exit handler that takes its time (a tracker's upload)
    pathlib.Path(__file__).with_suffix(".left").touch()


atexit.register(_leaving)


def lowercase_frac(prompts, completions, **kw):
    return [sum(ch.islower() for ch in c) / max(1, len(c)) for c in completions]
'''


def test_a_ctrl_c_after_the_run_ends_the_process_at_once_without_a_traceback(tmp_path):
    """CI: a second Ctrl-C reached the process in torch's exit handler, which printed a KeyboardInterrupt
    traceback (and exited 0). Once the run is over, a signal ends the process at once with 128 + the signal
    (SIGTERM and SIGHUP did so already: their default action)."""
    signum = signal.SIGINT
    run, reward = tmp_path / "run", reward_file(tmp_path, AT_EXIT)
    proc = subprocess.Popen(train_command(run, reward, "max_steps=1"), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    leaving, left = tmp_path / "lowercase_frac.leaving", tmp_path / "lowercase_frac.left"
    deadline = time.monotonic() + 300
    while not leaving.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert leaving.exists(), "the run never reached its exit handlers"
    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err and not left.exists()
    assert list_checkpoints(run), "the finished run saved nothing"
    assert "ended with status" not in err  # `rlvr train` knew the run had finished


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
