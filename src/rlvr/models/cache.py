"""Build a folder once, atomically, under the rlvr cache directory.

A folder counts as complete only if it holds the marker file, which the builder's wrapper writes
last, inside a private temp folder that is then renamed into place. So a crashed or concurrent
build never leaves a half folder that a later call takes as complete. Where `fcntl` exists a file
lock also serialises builders, so two processes do not both spend the conversion time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no lock; the rename alone keeps folders whole.
    fcntl = None

MARKER = ".rlvr-complete.json"


def rlvr_cache_dir() -> Path:
    """`$RLVR_CACHE_DIR`, else `~/.cache/rlvr` (read at each call, so tests can redirect it)."""
    configured = os.environ.get("RLVR_CACHE_DIR")
    if configured is not None and not configured.strip():
        raise ValueError("RLVR_CACHE_DIR is set but empty; unset it or point it at a writable folder")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rlvr"


def is_complete(folder: Path) -> bool:
    return (folder / MARKER).is_file()


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    if fcntl is None:
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(folder: Path, build: Callable[[Path], dict], *, description: str) -> Path:
    """Return `folder`, first running `build(tmp)` and renaming tmp → folder if it is not complete.

    `build` fills the empty temp folder it is given and returns a JSON-able dict (provenance) that
    is written as the marker. An exception in `build` removes the temp folder and propagates.
    """
    folder = Path(folder)
    if is_complete(folder):
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(
            f"cannot create the cache folder {folder.parent} for {description} ({error}); "
            "set RLVR_CACHE_DIR to a writable folder"
        ) from error
    with _exclusive_lock(folder.parent / f"{folder.name}.lock"):
        if is_complete(folder):  # another process finished while we waited for the lock
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the cache may be shared between users
        try:
            provenance = build(tmp)
            (tmp / MARKER).write_text(json.dumps(provenance, indent=2, sort_keys=True))
            if is_complete(folder):  # lock-free platform: a concurrent build won the race
                return folder
            if folder.exists():  # an incomplete leftover (no marker): move it aside, then drop it
                stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}.stale-", dir=folder.parent))
                os.replace(folder, stale / folder.name)
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return folder
