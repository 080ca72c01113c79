"""A pool of sandbox workers: program + input -> outcome, one program at a time per worker.

Each worker (``worker.py``) is one Python process that isolated itself once at start (namespaces,
read-only file system, no network, a PID namespace of its own) and forks a fresh process per
program, so a program costs a fork, not an interpreter's start-up (docs/performance.md, "Code
sandbox"). ``SandboxPool.run_many`` spreads jobs over the workers from threads; a worker that dies
is started again and its job scored as a sandbox failure.

Convention: a worker that cannot isolate itself raises ``SandboxUnavailable`` when the pool
starts (the one line names the missing isolation and ``code_sandbox=limits_only``); nothing is
run without isolation unless ``mode="limits_only"`` was asked for.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Self

from rlvr.rewards.sandbox.worker_languages import LANGUAGES  # name -> Language: its runners, samples

logger = logging.getLogger(__name__)

SANDBOX_MODES = ("namespaces", "limits_only")
WORKER_FILE = Path(__file__).with_name("worker.py")
HIDDEN_FOLDERS = ("/root", "/home", "/run", "/dev/shm", "/var/tmp", "/tmp")
_WORKER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
LIMITS_ONLY_HINT = ("pass code_sandbox=limits_only to run programs with resource limits only (no network, "
                    "file-system or process isolation: a program can read your files and reach the network), knowingly")


class SandboxUnavailable(ValueError):
    """The kernel refused an isolation step (user/mount/network/PID namespaces, a read-only remount); a ValueError
    so that the commands print its one line, as for a bad option."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one program may use. Convention: the CPU limit is whole seconds (RLIMIT_CPU), rounded up."""

    cpu_s: float = 5.0
    wall_s: float = 10.0
    memory_mb: int = 1024  # RLIMIT_AS: address space, not resident memory
    file_mb: int = 16  # RLIMIT_FSIZE: the largest file it may write
    processes: int = 32  # RLIMIT_NPROC, counted per sandbox user namespace
    open_files: int = 64
    output_bytes: int = 1 << 20  # stdout and stderr each; past it the program is killed
    tmp_mb: int = 64  # the program's private /tmp (its folder): a tmpfs of this size (namespaces mode)

    def __post_init__(self):
        for name in ("cpu_s", "wall_s", "memory_mb", "file_mb", "processes", "open_files", "output_bytes", "tmp_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class Job:
    """One program to run. ``language``: a name of ``worker_languages.LANGUAGES`` (its entry's runners run it);
    ``kind``: one of that entry's runners: python's ``script`` (run as ``python -c``), ``checked`` (then ``test``;
    ``completed`` only if the test code ran to its end), ``verl_apps`` (verl's APPS runner on ``in_outs``); every
    other language's ``script``. A language or kind without a runner is refused here, naming the valid ones."""

    source: str
    stdin: str = ""
    kind: str = "script"
    test: str = ""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    language: str = "python"
    extra: dict = field(default_factory=dict)  # verl_apps: in_outs, runner_path, timeout

    def __post_init__(self):
        if self.language not in LANGUAGES:
            raise ValueError(f"the sandbox runs {', '.join(LANGUAGES)} programs, not {self.language!r}: pass "
                             "language= one of them, or add an entry to LANGUAGES in rlvr/rewards/sandbox/"
                             "worker_languages.py (docs/design/architecture.md, 'Add a sandbox language')")
        kinds = LANGUAGES[self.language].runners
        if self.kind not in kinds:
            raise ValueError(f"a {self.language} program runs as {' or '.join(map(repr, kinds))} (its runners), not "
                             f"{self.kind!r}: pass kind= one of them, or add a runner to its entry in LANGUAGES "
                             "(rlvr/rewards/sandbox/worker_languages.py)")

    def message(self) -> dict:
        verl = self.kind == "verl_apps"  # verl's runner: its file and numpy, read-only, besides the system's
        read_only = [self.extra["runner_path"], *package_paths("numpy")] if verl else []
        return {"source": self.source, "stdin": self.stdin, "kind": self.kind, "test": self.test,
                "language": self.language,
                "limits": asdict(self.limits), "preload": ["numpy"] if verl else [], "read_only": read_only,
                **self.extra}


@dataclass(frozen=True)
class Outcome:
    """What a program did. ``completed``: a ``checked`` job's test code ran to its end (a nonce on a pipe the
    program cannot name came back); ``sandbox_error``: the worker failed, not the program."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    output_truncated: bool
    completed: bool
    stdout: str
    stderr: str
    wall_s: float
    result: str | None = None
    sandbox_error: str | None = None

    @property
    def ok(self) -> bool:
        """Exited with status 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated and self.sandbox_error is None

    @classmethod
    def failed(cls, why: str) -> Outcome:
        return cls(None, None, False, False, False, "", "", 0.0, None, why)


def _kept_paths() -> list[str]:
    """The interpreter's folders (bound back where a hidden folder covers them)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(WORKER_FILE.parent),
             os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sys.executable)}
    paths |= {entry for entry in sys.path if entry and "site-packages" in entry or "dist-packages" in entry}
    return sorted(os.path.realpath(path) for path in paths if path and os.path.isdir(path))


# What a program's file system holds besides its /proc, /dev and /tmp (worker_program._private_folders): the
# system's programs and libraries (g++ for C++ is under /usr), /etc, and the interpreter's standard library
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def program_paths() -> dict[str, list[str]]:
    """``bind``: what every program sees, read-only; ``cover``: package folders inside them left empty (every
    site-packages and dist-packages this interpreter or the system's Pythons read). No checkout, run folder,
    dataset, HOME or installed package."""
    import glob
    import site

    stdlib = os.path.realpath(os.path.dirname(os.__file__))  # the base interpreter's, also from a venv
    interpreter = {os.path.realpath(sys.executable)}
    library, libdir = _sysconfig_var("LDLIBRARY"), _sysconfig_var("LIBDIR")
    if library.endswith(".so") or ".so." in library:  # a shared libpython the interpreter loads
        interpreter.add(os.path.realpath(os.path.join(libdir, library)))
    bind = [p for p in (*SYSTEM_PATHS, stdlib, *sorted(interpreter)) if os.path.lexists(p)]
    packages = {*site.getsitepackages(), site.getusersitepackages(), os.path.join(stdlib, "site-packages"),
                *glob.glob("/usr/lib/python3*/dist-packages"), *glob.glob("/usr/lib/python3*/site-packages"),
                *glob.glob("/usr/local/lib/python3*/dist-packages"), *glob.glob("/usr/local/lib/python3*/site-packages")}
    cover = sorted({os.path.realpath(p) for p in packages if p and os.path.isdir(p)})
    return {"bind": bind, "cover": cover}


def _sysconfig_var(name: str) -> str:
    import sysconfig

    return str(sysconfig.get_config_var(name) or "")


@functools.cache
def package_paths(name: str) -> list[str]:
    """An installed package's folder (and a wheel's ``<name>.libs`` beside it), found without importing it (once:
    every verl job asks)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    folders = [os.path.realpath(p) for p in spec.submodule_search_locations]
    return folders + [f"{f}.libs" for f in folders if os.path.isdir(f"{f}.libs")]


def _hidden_folders() -> list[str]:
    home = os.path.realpath(os.path.expanduser("~"))
    folders = [*HIDDEN_FOLDERS, *([home] if home.count("/") >= 1 and home != "/" else [])]
    return sorted({os.path.realpath(folder) for folder in folders if folder != "/"})


class Worker:
    """One sandbox worker process and its pipe."""

    def __init__(self, mode: str):
        self.mode = mode
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(WORKER_FILE), mode, json.dumps(_hidden_folders()), json.dumps(_kept_paths()),
             json.dumps(program_paths())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_WORKER_ENV,
            start_new_session=True, cwd="/")
        ready = self._receive()
        if ready is None:
            detail = self.process.stderr.read().decode("utf-8", "replace").strip().splitlines()
            self.close()
            failure = next((line[len("SETUP-FAILED "):] for line in detail if line.startswith("SETUP-FAILED ")), None)
            if failure is not None:
                raise SandboxUnavailable(f"the code sandbox cannot isolate programs on this machine ({failure}); "
                                         f"{LIMITS_ONLY_HINT}")
            raise RuntimeError(f"the code sandbox worker did not start: {' | '.join(detail[-3:]) or 'no message'}")
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        for _ in iter(lambda: self.process.stderr.read(65536), b""):
            pass

    def _receive(self) -> dict | None:
        header = self.process.stdout.read(4)
        if len(header) < 4:
            return None
        (size,) = struct.unpack(">I", header)
        return json.loads(self.process.stdout.read(size))

    def run(self, job: Job) -> Outcome:
        data = json.dumps(job.message()).encode()
        try:
            self.process.stdin.write(struct.pack(">I", len(data)) + data)
            self.process.stdin.flush()
            reply = self._receive()
        except (BrokenPipeError, OSError) as exc:
            reply, why = None, str(exc)
        else:
            why = "the worker exited"
        if reply is None:  # it died with the program running: scored as a crashing program, never left unscored
            logger.warning("code sandbox: a worker died while a program ran (%s); the program scores as a crash and "
                           "the worker is replaced", why)
            return Outcome(None, None, False, False, False, "", f"the sandbox worker died while the program ran ({why})",
                           0.0)
        return Outcome(**reply)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


class SandboxPool:
    """``workers`` sandbox workers; ``run`` and ``run_many`` are thread-safe.

    Args:
        mode: ``namespaces`` (the default: isolation, or SandboxUnavailable at start) | ``limits_only``.
        workers: programs run at once.
    """

    def __init__(self, mode: str = "namespaces", workers: int = 2):
        if mode not in SANDBOX_MODES:
            raise ValueError(f"code_sandbox must be one of {SANDBOX_MODES}, got {mode!r}")
        if workers < 1:
            raise ValueError(f"a sandbox pool needs at least 1 worker, got {workers}")
        self.mode = mode
        self._idle: queue.Queue[Worker] = queue.Queue()
        self._all: list[Worker] = []
        self._lock = threading.Lock()
        for _ in range(workers):
            self._add(Worker(mode))
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlvr-sandbox")
        if mode == "limits_only":
            logger.warning("code sandbox: limits_only (resource limits, a session, a minimal environment; no "
                           "namespaces): programs can read files, reach the network and leave processes behind")

    def _add(self, worker: Worker) -> None:
        with self._lock:
            self._all.append(worker)
        self._idle.put(worker)

    def run(self, job: Job) -> Outcome:
        """Run one job on the next idle worker (a dead worker is replaced, never used). RuntimeError once every
        worker has died and none could be started again (it no longer waits for a worker that will not come)."""
        worker = self._next_idle()
        while not worker.alive:  # died while idle: replaced before it is given a job
            self._replace(worker)
            with self._lock:
                if not self._all:  # this program did not run: a sandbox failure (the next call raises)
                    return Outcome.failed("no sandbox worker could be started again")
            worker = self._next_idle()
        try:
            return worker.run(job)
        finally:
            if worker.alive:
                self._idle.put(worker)
            else:
                self._replace(worker)

    def _next_idle(self) -> Worker:
        while True:
            with self._lock:
                if not self._all:
                    raise RuntimeError("the code sandbox has no worker left: they died and could not be started "
                                       "again (see the warnings above)")
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                continue

    def _replace(self, dead: Worker) -> None:
        with self._lock:
            self._all.remove(dead)
        dead.close()
        try:
            self._add(Worker(self.mode))
        except (RuntimeError, OSError, ValueError) as error:  # (ValueError: SandboxUnavailable)
            logger.warning("code sandbox: a worker died and could not be started again (%s); %d left",
                           error, len(self._all))

    def run_many(self, jobs: list[Job]) -> list[Outcome]:
        """Outcomes in the order of ``jobs``, run on all workers at once."""
        return list(self._executor.map(self.run, jobs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        with self._lock:
            for worker in self._all:
                worker.close()
            self._all.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SHARED: dict[tuple[str, int], SandboxPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(mode: str = "namespaces", workers: int | None = None) -> SandboxPool:
    """The process's pool for ``mode`` (started on first use, then reused by every code reward)."""
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    with _SHARED_LOCK:
        if (mode, workers) not in _SHARED:
            _SHARED[(mode, workers)] = SandboxPool(mode, workers)
        return _SHARED[(mode, workers)]
