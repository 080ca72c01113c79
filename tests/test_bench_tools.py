"""benchmarks/bench_tools.py's whole path on the tiny model (a few seconds): the four rollouts run and are reported,
each tool rollout making its calls. It checks the code path and the counts, not a speed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_four_rollouts_run_and_make_their_calls():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/bench_tools.py", "--model", "tiny-random", "--rows", "2",
                           "--calls", "2", "--turn-tokens", "8", "--repeats", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in proc.stdout.splitlines()
            if line.startswith("| ") and "---" not in line and "rollout" not in line.split(" | ")[0]}
    tooled = ("python tool in rlvr's sandbox", "python tool in rlvr's sandbox, tool_scheduling=rows",
              "python tool, a fresh plain subprocess per call")
    assert set(rows) == {"no tool calls (one turn, the same tokens)", *tooled}
    assert rows["no tool calls (one turn, the same tokens)"][3] == "0 (0)"
    for name in tooled:
        assert rows[name][3] == "4 (0)"  # 2 responses x 2 calls, the forced cell runs fine
    assert "in tool calls: the sandbox" in proc.stdout
