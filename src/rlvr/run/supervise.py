"""``rlvr train`` watches its training process, so that a run that did not finish is never reported as done.

A reward function (or a library) that calls ``os._exit(0)`` ends the process at once: no exception,
no ``finally``, no ``atexit``, exit status 0. No code inside that process can see it, so the command
``rlvr train`` (and ``rlvr sft``) runs the training in a child process — the same command line, in the
same process group, with the same stdin, stdout and stderr — and waits for it (:func:`supervise`):

- The child writes one byte to a pipe as the last thing its ``main`` does, however it ends
  (:func:`report_finished`). A child that exits without it — ``os._exit``, C's ``exit()``, killed by a
  signal (SIGKILL, the OOM killer) — is named in one line by the parent, which exits non-zero: 128 + the
  signal that killed it, the child's status, or 1 for a status of 0. Otherwise the parent exits with the
  child's status, and has printed nothing of its own.
- Signals: the child is in the parent's process group, so Ctrl-C, and the SIGHUP of a terminal that
  closes, reach it directly. A SIGINT, SIGTERM or SIGHUP sent to the parent alone (``kill PID``,
  Kubernetes, ``timeout``) is passed on to the child — unless the child received that signal too (SLURM
  and systemd signal every process of a job), since a second signal stops a run at once, losing the step
  under way. The child's signal module writes every signal to a second pipe the moment it arrives
  (``signal.set_wakeup_fd``, from C, even while Python is busy in a long torch call); the parent passes
  a signal on only when the child has not reported the same one within ``ECHO_WINDOW_S``.
- The child dies with the parent (``PR_SET_PDEATHSIG``: a ``kill -9`` of ``rlvr train`` ends the run as
  before). Processes the child forks do not keep its pipes or the run folder's lock (``folder.py``).

Only ``rlvr train``/``rlvr sft`` started as a program are supervised; ``main(argv)`` called from Python
trains in the calling process, as do torchrun's workers (the launcher is the supervised child).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

ENV = "RLVR_TRAIN_SUPERVISOR"  # "<parent pid>:<finished fd>:<signal fd>", read and removed by the child
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ECHO_WINDOW_S = 0.25  # a signal the child reports within this time of the parent's is the same signal (its report
# is written from C the moment the signal arrives: milliseconds)
_PR_SET_PDEATHSIG = 1

_finished_fd: int | None = None
_supervisor_pid: int | None = None


def supervisor_pid() -> int | None:
    """The pid of the ``rlvr train`` command watching this process (None: not supervised)."""
    return _supervisor_pid


def become_supervised_child() -> bool:
    """In the child: take the pipes from ``$RLVR_TRAIN_SUPERVISOR`` (False: this process is not the child)."""
    global _finished_fd, _supervisor_pid
    value = os.environ.pop(ENV, None)  # torchrun's workers and any other process started later: not the child
    if value is None:
        return False
    parent, finished_fd, signal_fd = (int(part) for part in value.split(":"))
    if os.getppid() != parent:
        return False
    _die_with_parent(parent)
    signal.set_wakeup_fd(signal_fd, warn_on_full_buffer=False)
    _finished_fd, _supervisor_pid = finished_fd, parent
    os.register_at_fork(after_in_child=_forget_pipes)
    return True


def report_finished() -> None:
    """In the child, as its ``main`` ends (returns or raises): the parent then reports its exit status as is."""
    global _finished_fd
    if _finished_fd is not None:
        os.write(_finished_fd, b"x")
        os.close(_finished_fd)
        _finished_fd = None


def _forget_pipes() -> None:
    """In a process the child forks: its pipes are not this process's to write (its signals, its end)."""
    global _finished_fd, _supervisor_pid
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread
        pass
    if _finished_fd is not None:
        try:
            os.close(_finished_fd)
        except OSError:
            pass
    _finished_fd = _supervisor_pid = None


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the parent dies; then, if it already has, die now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the child outlives a killed parent
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class _Relay:
    """The parent's signals and the child's reports of its own; passes on those the child did not get."""

    def __init__(self, child: subprocess.Popen):
        self.child = child
        self.pending: list[tuple[int, float]] = []  # received by the parent, not (yet) seen by the child
        self.seen: list[tuple[int, float]] = []  # reported by the child, not matched to a parent's signal
        self.echoes: dict[int, int] = {}  # passed on, their report not yet back

    def parent_got(self, signum: int, frame) -> None:
        self.pending.append((signum, time.monotonic()))

    def child_got(self, data: bytes) -> None:
        now = time.monotonic()
        for signum in data:
            if self.echoes.get(signum):
                self.echoes[signum] -= 1
            else:
                self.seen.append((signum, now))

    def pass_on(self) -> None:
        """Match the parent's signals to the child's; pass on those the child has not had within the window."""
        now, sent = time.monotonic(), set()
        self.seen = [(s, t) for s, t in self.seen if now - t < 2 * ECHO_WINDOW_S]
        for signum, at in list(self.pending):
            match = next(((s, t) for s, t in self.seen if s == signum and abs(t - at) < ECHO_WINDOW_S), None)
            if match is not None:
                self.seen.remove(match)
                self.pending.remove((signum, at))
            elif now - at >= ECHO_WINDOW_S:
                if signum in sent:
                    time.sleep(0.02)  # the first has arrived: two of a kind sent at once would merge into one
                self.pending.remove((signum, at))
                sent.add(signum)
                self.echoes[signum] = self.echoes.get(signum, 0) + 1
                try:
                    self.child.send_signal(signum)
                except ProcessLookupError:
                    pass


def supervise(argv: list[str], command: str, *, env: dict[str, str]) -> int:
    """Run ``python -m rlvr.cli ARGV`` as the training process (in ``env``) and return the status ``rlvr train``
    exits with."""
    finished_r, finished_w = os.pipe()
    signal_r, signal_w = os.pipe()
    os.set_blocking(signal_w, False)  # set_wakeup_fd's requirement
    env = {**env, ENV: f"{os.getpid()}:{finished_w}:{signal_w}"}
    child = subprocess.Popen([sys.executable, "-m", "rlvr.cli", *argv], env=env, pass_fds=(finished_w, signal_w))
    os.close(finished_w)
    os.close(signal_w)
    relay = _Relay(child)
    previous = {signum: signal.signal(signum, relay.parent_got) for signum in SIGNALS}
    finished, open_fds = False, [finished_r, signal_r]
    try:
        while open_fds:
            exited = child.poll() is not None  # then read what it wrote, and stop
            ready, _, _ = select.select(open_fds, [], [], 0 if exited else 0.1)
            for fd in ready:
                data = os.read(fd, 4096)
                if not data:  # the child closed it
                    open_fds.remove(fd)
                elif fd == signal_r:
                    relay.child_got(data)
                else:
                    finished = True
            relay.pass_on()
            if exited and not ready:
                break
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(finished_r)
        os.close(signal_r)
        child.wait()
    return _exit_status(child, finished, command)


def _exit_status(child: subprocess.Popen, finished: bool, command: str) -> int:
    """The child's status; a child that ended without finishing is named in one line, and never 0."""
    status = child.returncode
    if finished:
        return status if status >= 0 else 128 - status
    advice = ("what the run saved is in its last checkpoint: continue with the same command and resume=true "
              "(if it wrote none, start over with overwrite_output_dir=true or a new output_dir)")
    if status < 0:
        name = signal.Signals(-status).name
        hint = " (the out-of-memory killer, or kill -9?)" if -status == signal.SIGKILL else ""
        print(f"rlvr {command}: the training process (pid {child.pid}) was killed by {name}{hint} before the run "
              f"finished; {advice}", file=sys.stderr)
        return 128 - status
    print(f"rlvr {command}: the training process (pid {child.pid}) ended with status {status} before the run "
          "finished, without a word: something in it called os._exit() (a reward function? it ends the process "
          f"at once, saving nothing); {advice}", file=sys.stderr)
    return status or 1
