"""`rlvr eval` stopped by SIGINT/SIGTERM in a real subprocess: one line, exit 130/143, resume = uninterrupted."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rlvr.eval.problems_file import problems_path

PROBLEMS = 40


def _command(data, out) -> list[str]:
    # Digits as golds and the last number as the answer: the tiny random model gets some right, so equal
    # pass@k below means the same samples, not two zeros. One problem per generate call (batch 4 = n).
    return [sys.executable, "-m", "rlvr.cli", "eval", "--model", "tiny-random", "--data", str(data), "--n", "4",
            "--k", "1,4", "--temperature", "1.0", "--top_p", "1.0", "--max_completion_length", "32",
            "--answer-extraction", "flexible", "--batch-size", "4", "--no-progress", "--out", str(out)]


# Same thread count in every process: on some CPUs kernels' results depend on it (tests/train/test_crash_resume.py).
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    data = folder / "digits.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say {i % 10}.", "answer": str(i % 10)}) + "\n"
                            for i in range(PROBLEMS)), encoding="utf-8")
    out = folder / "whole.json"
    subprocess.run(_command(data, out), env=ENV, capture_output=True, check=True, timeout=300)
    result = json.loads(out.read_text())
    assert 0 < result["datasets"][str(data)]["pass@k"]["1"] < 1  # see _command
    return data, result, problems_path(out).read_text().splitlines()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_evaluation_says_how_to_resume_and_resumes_to_the_same_result(tmp_path, uninterrupted, signum):
    data, whole, whole_lines = uninterrupted
    out = tmp_path / "stopped.json"
    problems = problems_path(out)
    # A new session, signalled as a group: Ctrl-C in a terminal reaches the verifier workers too.
    proc = subprocess.Popen(_command(data, out), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if problems.exists() and problems.read_text().count("\n") >= 2:  # the header and one problem
            break
        time.sleep(0.01)
    if proc.poll() is not None:  # ended before the signal: say how, instead of "No such process"
        _, err = proc.communicate()
        pytest.fail(f"the evaluation ended (exit {proc.returncode}) before it was signalled:\n{err.decode()[-3000:]}")
    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 128 + signum, err  # 130 for SIGINT, 143 for SIGTERM
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"rlvr eval: stopped by {signal.Signals(signum).name}; ")
    assert str(problems) in last and "run the same command again to continue" in last
    text = problems.read_text()
    saved = text.splitlines()
    assert text.endswith("\n") and all(json.loads(line) for line in saved)  # whole lines only
    assert 2 <= len(saved) < 1 + PROBLEMS  # it really stopped in the middle
    assert saved == whole_lines[:len(saved)]
    assert f"{len(saved) - 1} finished problem" in last

    resumed = subprocess.run(_command(data, out), env=ENV, capture_output=True, check=False, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert json.loads(out.read_text()) == whole
    assert problems.read_text().splitlines() == whole_lines
