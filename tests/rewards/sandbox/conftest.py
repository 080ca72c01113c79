"""One sandbox pool for these tests, and a check that a program leaves no process behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlvr.rewards.sandbox import SandboxPool


def descendants(pid: int) -> set[int]:
    """Host pids of every process under ``pid`` (a sandbox worker's namespace lives under it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


@pytest.fixture(scope="module")
def pool():
    with SandboxPool("namespaces", workers=1) as sandbox:
        yield sandbox


@pytest.fixture
def no_leftovers(pool):
    """After the test: the worker's tree is as it was (outer process + PID 1), and the pool still runs programs."""
    worker = pool._all[0]
    before = descendants(worker.process.pid)
    yield worker
    assert worker.alive, "the program killed its sandbox worker"
    assert descendants(worker.process.pid) == before, "a process the program started is still running"
    assert os.getpgid(0) == os.getpgid(0)
