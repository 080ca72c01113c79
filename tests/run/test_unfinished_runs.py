"""A run that did not finish is never reported as done; a lock kept by a leftover process is named (issue 41,
point 6; src/rlvr/run/supervise.py)."""

import os
import signal
import subprocess
import sys

import pytest

from rlvr.run import supervise
from rlvr.run.folder import RunFolderBusy, RunFolderLock

from .cli_runs import ENV, last_line, reward_file, train_command

ENDS_THE_PROCESS = '''
import os
import signal


def ends(prompts, completions, **kw):
    {how}
'''


@pytest.mark.parametrize(("how", "status", "said"), [
    ("os._exit(0)", 1, "ended with status 0 before the run finished, without a word: something in it called os._exit()"),
    ("os.kill(os.getpid(), signal.SIGKILL)", 137, "was killed by SIGKILL (the out-of-memory killer, or kill -9?)"),
])
def test_a_training_process_that_ends_without_finishing_is_named_and_never_success(tmp_path, how, status, said):
    """A reward calling os._exit(0) ended `rlvr train` with rc 0, no message, nothing saved."""
    reward = reward_file(tmp_path, ENDS_THE_PROCESS.format(how=how), "ends")
    done = subprocess.run(train_command(tmp_path / "run", reward, "max_steps=2"), check=False, env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == status, done.stderr[-2000:]
    line = last_line(done.stderr)
    assert line.startswith("rlvr train: the training process (pid ") and said in line
    assert "overwrite_output_dir=true" in line


FORKS = '''
import os
import time


def forks(prompts, completions, **kw):
    if not os.path.exists({pidfile!r}):
        pid = os.fork()
        if pid == 0:  # a long-lived child, as a reward's server or pool might leave
            time.sleep(120)
            os._exit(0)
        with open({pidfile!r}, "w") as fh:
            fh.write(str(pid))
    return [float(len(c) % 3) for c in completions]
'''


def test_a_child_forked_by_a_reward_does_not_keep_the_run_locked(tmp_path):
    """resume=true was refused as "in use by rlvr train pid N", N the dead trainer, while the child lived."""
    pidfile = tmp_path / "child.pid"
    reward, run = reward_file(tmp_path, FORKS.format(pidfile=str(pidfile)), "forks"), tmp_path / "run"
    try:
        with open(tmp_path / "log", "w") as log:  # not a pipe: the forked child holds stdout and stderr
            first = subprocess.run(train_command(run, reward, "max_steps=1"), check=False, env=ENV, stdout=log, stderr=log,
                                   timeout=300)
            assert first.returncode == 0, (tmp_path / "log").read_text()[-2000:]
            child = int(pidfile.read_text())
            os.kill(child, 0)  # still alive
            again = subprocess.run(train_command(run, reward, "max_steps=2", "resume=true"), check=False, env=ENV, stdout=log,
                                   stderr=log, timeout=300)
        assert again.returncode == 0, (tmp_path / "log").read_text()[-2000:]
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


HOLDS_THE_LOCK_AND_LEAVES = '''
import subprocess, sys
from pathlib import Path
from rlvr.run.folder import RunFolderLock
lock = RunFolderLock(Path(sys.argv[1]))
# a process started some other way than a fork (here: handed the lock's file), left running
leftover = subprocess.Popen(["sleep", "120"], pass_fds=(lock._fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(leftover.pid)
'''


def test_a_lock_kept_by_a_leftover_process_names_it_and_how_to_end_it(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-c", HOLDS_THE_LOCK_AND_LEAVES, str(run)], env=ENV, capture_output=True,
                         text=True, timeout=60, check=True)
    leftover = int(out.stdout.split()[0])
    try:
        with pytest.raises(RunFolderBusy) as info:
            RunFolderLock(run)
        message = str(info.value)
        assert f"is locked by pid {leftover} (sleep), left behind by rlvr train pid " in message
        assert "which has ended" in message and f"End it with `kill {leftover}`" in message
    finally:
        os.kill(leftover, signal.SIGKILL)


class _Clock:
    """supervise's ``time``: ``monotonic`` is ``now``, moved by the test; ``sleep`` returns at once."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        pass


class _Child:
    def __init__(self):
        self.sent = []

    def send_signal(self, signum):
        self.sent.append(signum)


def test_a_signal_is_passed_on_only_when_the_training_process_did_not_get_it(monkeypatch):
    """`kill PID` reaches only `rlvr train`: passed on. SLURM's SIGTERM reaches both: not passed on (a second
    SIGTERM would stop the run at once, losing the step). A clock of our own: a loaded machine's pauses
    between two calls must not decide the outcome."""
    clock = _Clock()
    monkeypatch.setattr(supervise, "time", clock)
    window = supervise.ECHO_WINDOW_S
    child = _Child()
    relay = supervise._Relay(child)
    relay.parent_got(signal.SIGTERM, None)  # the parent alone
    clock.now += window / 2
    relay.pass_on()
    assert child.sent == []  # not yet: the child may report it within the window
    clock.now += window
    relay.pass_on()
    assert child.sent == [signal.SIGTERM]
    relay.child_got(bytes([signal.SIGTERM]))  # the echo of the one passed on
    relay.parent_got(signal.SIGTERM, None)  # now both get one
    relay.child_got(bytes([signal.SIGTERM]))
    clock.now += 1.2 * window
    relay.pass_on()
    assert child.sent == [signal.SIGTERM]  # not passed on again
    relay.parent_got(signal.SIGINT, None)  # two Ctrl-C to the parent alone: two are passed on
    relay.parent_got(signal.SIGINT, None)
    clock.now += 1.2 * window
    relay.pass_on()
    assert child.sent == [signal.SIGTERM, signal.SIGINT, signal.SIGINT]
