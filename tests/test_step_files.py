"""One training step stays small to read: tools/step_files.py traces the rlvr files a step enters.

Limits (issue 31; 21 since issue 38 added train/plan.py's step counter, 20 again since issue 51): a GRPO step enters at most 20 files of rlvr, a reader follows it (the step and the
functions it calls) in at most 8, and DaGRPO and TA-GRPO each add at most 3; the path from ``training_step``
to the loss crosses at most 3 files (trainer.py, update.py, core/losses.py) in at most 5 calls (issue 43). Every
thread the run starts from its set-up on is counted (issue 43). A change that breaks one prints the lists, so
the file that joined is easy to find (``python tools/step_files.py``).
"""

import sys
import threading
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _step_files():
    sys.path.insert(0, str(TOOLS))
    try:
        import step_files
    finally:
        sys.path.remove(str(TOOLS))
    return step_files


def test_a_thread_started_at_set_up_is_counted_while_the_step_runs():
    """The hook is given to threads when they start (threading.setprofile); a thread started at set-up, before
    the traced step, and working during it counts; its work before the step does not."""
    from rlvr import threads as omp  # a file the thread enters before the step
    from rlvr.core import names  # a file of rlvr the thread's work enters

    step_files = _step_files()
    trace = step_files.StepTrace()
    trace.install()
    ready, go, done = threading.Event(), threading.Event(), threading.Event()

    def worker():  # a pool thread started at set-up: idle until the step gives it work
        omp.applied()  # before the step: not counted
        ready.set()
        go.wait()
        names.resolve_aggregation("token_mean")
        done.set()

    try:
        thread = threading.Thread(target=worker)
        thread.start()
        ready.wait(10)
        trace.start()
        go.set()
        done.wait(10)
        trace.stop()
        thread.join(10)
    finally:
        trace.stop()
        trace.uninstall()
    assert "rlvr/core/names.py" in trace.entered and "rlvr/threads.py" not in trace.entered
    assert threading.current_thread() is threading.main_thread()


@pytest.mark.slow
def test_a_step_enters_few_files():
    step_files = _step_files()
    result = step_files.measure()
    report = "\n".join(f"{name}: {files}" for name, files in result.items())
    grpo = result["grpo"]
    assert len(grpo["entered"]) <= 20, report  # issue 51: the split of experience.py/update.py by job kept it at 20
    assert "rlvr/train/trainer.py" in grpo["entered"] and "rlvr/core/losses.py" in grpo["entered"], report
    assert all(len(files["reader"]) <= 8 for files in result.values()), report
    assert len(result["dagrpo"]["added"]) <= 3 and "rlvr/train/dagrpo.py" in result["dagrpo"]["added"], report
    assert len(result["tagrpo"]["added"]) <= 3 and "rlvr/train/tagrpo.py" in result["tagrpo"]["added"], report
    for files in result.values():  # the path from the step to the loss (issue 43)
        assert files["loss_path"] == ["rlvr/train/trainer.py", "rlvr/train/update.py", "rlvr/core/losses.py"], report
        assert files["loss_calls"][0] == "rlvr/train/trainer.py::training_step", report
        assert files["loss_calls"][-1] == "rlvr/core/losses.py::policy_loss" and len(files["loss_calls"]) <= 5, report
