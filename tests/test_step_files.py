"""One training step stays small to read: tools/step_files.py traces the rlvr files a step enters.

Limits (issue 31; 21 since issue 38 added train/plan.py's step counter): a GRPO step enters at most 21 files of rlvr, a reader follows it (the step and the
functions it calls) in at most 8, and DaGRPO and TA-GRPO each add at most 3. A change that breaks one
prints the lists, so the file that joined is easy to find (``python tools/step_files.py``).
"""

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


@pytest.mark.slow
def test_a_step_enters_few_files():
    sys.path.insert(0, str(TOOLS))
    try:
        import step_files
    finally:
        sys.path.remove(str(TOOLS))
    result = step_files.measure()
    report = "\n".join(f"{name}: {files}" for name, files in result.items())
    grpo = result["grpo"]
    assert len(grpo["entered"]) <= 21, report  # 21 since issue 38: train/plan.py's RunLength counts optimiser steps
    assert "rlvr/train/trainer.py" in grpo["entered"] and "rlvr/core/losses.py" in grpo["entered"], report
    assert all(len(files["reader"]) <= 8 for files in result.values()), report
    assert len(result["dagrpo"]["added"]) <= 3 and "rlvr/train/dagrpo.py" in result["dagrpo"]["added"], report
    assert len(result["tagrpo"]["added"]) <= 3 and "rlvr/train/tagrpo.py" in result["tagrpo"]["added"], report
