"""The run folder: a unique default name, one writer at a time, nothing written over a folder that is
not an rlvr run; and its text files, written so that a crash loses nothing.

- Default names are ``runs/<algo>-<YYYYmmdd-HHMMSS>``, made unique by creating the folder
  exclusively (``-2``, ``-3``, ... when a parallel sweep starts in the same second).
- A run holds an exclusive ``flock`` on ``<run>/.rlvr.lock`` (holding its PID and host) from set-up
  to exit; a second writer stops at once naming the holder. The kernel drops the lock when the
  process dies, however it dies, so a killed run never leaves a stale lock.
- ``<run>/.rlvr-run`` marks a folder as an rlvr run. A non-empty folder without it (and without a
  run's ``metrics.jsonl`` beside an rlvr ``config.yaml``) is refused: rlvr would overwrite the user's
  ``config.yaml`` or ``samples.jsonl``.
- config.yaml is written atomically; metrics.jsonl and samples.jsonl hold one JSON object per line,
  each with a ``step``. On resume from a checkpoint at step k, lines of steps > k are dropped (those
  steps are re-run), so the files of a resumed run equal those of an uninterrupted one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rlvr.config import SECTIONS

MARKER = ".rlvr-run"
LOCK = ".rlvr.lock"


class RunFolderBusy(ValueError):
    """Another process is writing to this run folder."""


def new_run_folder(algo: str, *, root: Path = Path("runs"), now: datetime | None = None) -> Path:
    """Create and return a fresh ``runs/<algo>-<time>[-k]`` folder (exclusive ``mkdir``: unique)."""
    stem = f"{algo}-{(now or datetime.now()):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True, exist_ok=True)
    for k in range(1, 10_000):
        candidate = root / (stem if k == 1 else f"{stem}-{k}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run folder under {root} named {stem}-*; pass output_dir=")


def is_run_folder(path: Path) -> bool:
    """True when ``path`` was written by ``rlvr train``: the marker, or (a run from before the marker,
    e.g. the committed study runs) a metrics.jsonl beside a config.yaml made of rlvr's sections."""
    if (path / MARKER).exists():
        return True
    if not (path / "metrics.jsonl").is_file() or not (path / "config.yaml").is_file():
        return False
    try:
        saved = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return False
    return isinstance(saved, dict) and bool(saved) and set(saved) <= set(SECTIONS)


def check_not_foreign(path: Path) -> None:
    """Refuse a non-empty folder that is not an rlvr run (ValueError naming what is there and the fix)."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"output_dir={path} is a file, not a folder; choose another output_dir")
    if not path.is_dir() or is_run_folder(path):
        return
    found = sorted(p.name for p in path.iterdir() if p.name != LOCK)
    foreign = [p.parent for p in path.glob("checkpoint-*/trainer_state.json")]
    if foreign:  # a TRL (transformers) run's folder
        from rlvr.run.checkpoint_files import checkpoint_step
        from rlvr.run.resume import foreign_checkpoint

        newest = max(foreign, key=lambda p: checkpoint_step(p) or 0)
        raise ValueError(f"output_dir={path} holds a transformers/TRL run, not an rlvr run: {foreign_checkpoint(newest)}")
    if found:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise ValueError(f"output_dir={path} is not empty ({shown}) and is not an rlvr run: rlvr would write "
                         "config.yaml, metrics.jsonl and samples.jsonl over what is there. Choose a new or empty "
                         "output_dir (e.g. output_dir=" + str(path / "run") + ")")


def check_path_encodable(path: Path, option: str = "output_dir") -> None:
    """Refuse a path the run could not write: a name that is not UTF-8 (a byte like 0xff, which Python
    holds as a lone surrogate) trains, then fails at the first save, since safetensors, the JSON and YAML
    files and their names need UTF-8; refused before the model loads, naming the path and the fix."""
    text = os.path.abspath(path)
    try:
        os.fsencode(text)
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        bad = text[error.start:error.end].encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ValueError(f"{option}={shown} is not valid UTF-8 (it holds {bad}): the checkpoint writers "
                         f"(safetensors, JSON, YAML) need UTF-8 paths, so the run would fail at its first save; "
                         f"choose an {option} whose path is UTF-8 (letters, digits, - and _ are safe)") from None


def check_not_nested(path: Path) -> None:
    """Refuse an output_dir inside another run (or inside one of its checkpoints): that run's checkpoint
    rotation, ``overwrite_output_dir`` or a resume from an earlier step would delete this one. Links are
    followed: a symbolic link into a run is that run's folder."""
    inner = Path(os.path.realpath(path))
    via = f" (a link to {inner})" if inner != Path(os.path.abspath(path)) else ""
    for child, parent in zip([inner, *inner.parents], inner.parents):
        if is_run_folder(parent):
            where = f" (in its {child.name}/)" if child.name.startswith("checkpoint-") else ""
            raise ValueError(f"output_dir={path}{via} is inside the run folder {parent}{where}: that run's checkpoint "
                             "rotation, overwrite_output_dir or resume could delete this run with it. Choose a folder "
                             f"outside it (e.g. output_dir={parent.parent / (inner.name or 'run')})")


def mark_run_folder(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).touch()


class RunFolderLock:
    """An exclusive, non-blocking ``flock`` on ``<run>/.rlvr.lock``; ``release()`` or process exit drops it.

    The lock belongs to the open file, which a forked process shares: processes this one forks (a reward
    function's) close their copy at once (``os.register_at_fork``), so none keeps the folder locked after
    the run; a process that still holds it when its trainer is gone is named with the way to end it."""

    def __init__(self, path: Path):
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / LOCK
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(self._fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(self._fd)
            self._fd = None
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderBusy(_busy_message(path, holder)) from None
            raise
        _HELD.add(self._fd)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{_holder_line()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            _HELD.discard(self._fd)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


_HELD: set[int] = set()  # the lock files this process holds open


def _close_held_locks() -> None:
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_locks)


def _holder_line() -> str:
    """Who holds the lock: the ``rlvr train`` the user started (supervise.py), and the training process."""
    from rlvr.run.supervise import supervisor_pid

    parent, host = supervisor_pid(), socket.gethostname()
    if parent is None:
        return f"rlvr train pid {os.getpid()} on {host}"
    return f"rlvr train pid {parent} on {host}, training in pid {os.getpid()}"


def _busy_message(path: Path, holder: str) -> str:
    """Why ``path`` is in use: a running trainer, or a process left behind by one that has ended."""
    pids = [int(pid) for pid in re.findall(r"pid (\d+)", holder)]
    here = holder.endswith(f" on {socket.gethostname()}") or f" on {socket.gethostname()}," in holder
    if here and pids and not any(_alive(pid) for pid in pids):
        others = lock_holders(path / LOCK)
        if others:
            shown = ", ".join(f"pid {pid} ({name})" for pid, name in others)
            ends = " ".join(str(pid) for pid, _ in others)
            return (f"{path} is locked by {shown}, left behind by {holder}, which has ended: a process it "
                    f"started (a reward function's?) kept the run's lock. End it with `kill {ends}`, then run "
                    "the command again")
        return (f"{path} is locked, but {holder}, which took the lock, has ended: a process it started still "
                f"holds {path / LOCK}. Find it with `fuser {path / LOCK}` and end it, then run the command again")
    return (f"{path} is in use by {holder}: two runs writing into one folder would interleave their metrics and "
            "checkpoints. Wait for it to finish, stop it, or choose another output_dir")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holders(lock: Path) -> list[tuple[int, str]]:
    """The processes that have ``lock`` open (Linux's /proc; [] where it cannot be read), with their names."""
    try:
        target = os.stat(lock)
    except OSError:
        return []
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                name = (entry / "comm").read_text(errors="replace").strip() if (entry / "comm").exists() else "?"
                found.append((int(entry.name), name))
                break
    return sorted(set(found))


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_config(path: Path, config_dict: dict[str, Any]) -> None:
    write_text_atomic(path, yaml.safe_dump(config_dict, sort_keys=False))


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by None (JSON has no NaN) and tensors/numbers by floats."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLog:
    """Append-only JSONL file, one object per line, flushed after each write."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Keep only the records with ``step`` <= ``step``."""
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and _step_of(line) <= step
        ]
        write_text_atomic(self.path, "".join(f"{line}\n" for line in kept))

    def reset(self) -> None:
        write_text_atomic(self.path, "")

    def write(self, records: list[dict[str, Any]]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(json_safe(record), ensure_ascii=False) + "\n" for record in records)
            fh.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", -1))
    except (ValueError, AttributeError):
        return 1 << 62  # an unreadable (half-written) line is dropped with the later steps
