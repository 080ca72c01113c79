"""A copy of src/rlvr with one deliberate bug planted, and a test suite run against the copy.

Used by the tests that show a contract suite catches a plausible one-line bug: copy the package, plant
the bug with :func:`plant` (the text replaced must occur exactly once, so a refactor that moves it fails
loudly instead of planting nothing), then run the suite in a fresh interpreter whose ``rlvr`` is the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import rlvr

REPO = Path(__file__).resolve().parents[2]


def copy_package(tmp_path: Path) -> Path:
    """Copy src/rlvr to ``tmp_path/src/rlvr``; returns ``tmp_path/src`` (the copy's PYTHONPATH)."""
    src = tmp_path / "src"
    shutil.copytree(Path(rlvr.__file__).parent, src / "rlvr", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def plant(src: Path, relpath: str, old: str, new: str) -> None:
    """Replace ``old`` (occurring exactly once) by ``new`` in ``src/rlvr/relpath``."""
    path = src / "rlvr" / relpath
    text = path.read_text()
    assert text.count(old) == 1, f"{relpath}: expected exactly one {old!r} to plant the bug in, found {text.count(old)}"
    path.write_text(text.replace(old, new))


def append(src: Path, relpath: str, code: str) -> None:
    """Append ``code`` to ``src/rlvr/relpath`` (an addition made as a checklist says)."""
    with (src / "rlvr" / relpath).open("a") as file:
        file.write(code)


def copy_env(src: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def run_tests_on_copy(src: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``pytest args...`` from the repository root, in a fresh interpreter importing the copy's rlvr.

    Checks first that the interpreter does import the copy (an editable install must not win)."""
    env = copy_env(src)
    where = subprocess.run([sys.executable, "-c", "import rlvr; print(rlvr.__file__)"], env=env, cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    assert str(src) in where, f"the copy is not what a fresh interpreter imports: {where}"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *args], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def failed_tests(done: subprocess.CompletedProcess) -> list[str]:
    """The node ids pytest's short summary (``-ra``) lists as FAILED or ERROR."""
    return [line.split()[1] for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
