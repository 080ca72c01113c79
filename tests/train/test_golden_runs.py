"""The trainer's numerics are pinned: three golden runs (grpo with β and 2 mini-batches, dagrpo with
anchors, tagrpo with pools and truncated IS) reproduce the recorded metrics, samples and final weights.

Recorded by ``tests/train/golden/record.py --write`` before the training step was restructured
(issue 17), so a refactoring that changes a number fails here. On the machine that recorded them
(same CPU model, torch, transformers, one thread) the comparison is exact and includes the weights'
hash; on another machine float sums may differ at ~1e-7, so numbers are compared at rtol 1e-5 and
the hash is not compared (the test says so in its output). Keys a run has and the recording has not
(metrics added since, e.g. TRL's names) are not compared; a recorded key a run lacks is a change.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


def _close(a, b, *, exact: bool) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not exact:
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return a == b


def _differences(expected: dict, actual: dict, *, exact: bool) -> list[str]:
    out = []
    for kind in ("metrics", "samples"):
        want, got = expected[kind], actual[kind]
        if len(want) != len(got):
            out.append(f"{kind}: {len(got)} records, recorded {len(want)}")
            continue
        for i, (w, g) in enumerate(zip(want, got)):
            for key in sorted(w):  # a key added since the recording is no changed number (TRL's metric names)
                if key not in g or not _close(w[key], g[key], exact=exact):
                    out.append(f"{kind}[{i}][{key}]: {g.get(key, '<missing>')!r}, recorded {w.get(key, '<missing>')!r}")
    if exact and expected["weights_sha256"] != actual["weights_sha256"]:
        out.append("final weights differ (sha256)")
    return out


@pytest.mark.slow
def test_golden_runs_reproduce_the_recorded_numbers(tmp_path):
    out = tmp_path / "runs.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(GOLDEN / "record.py"), "--out", str(out)], env=env, check=True,
                   capture_output=True, timeout=600)
    expected, actual = json.loads((GOLDEN / "runs.json").read_text()), json.loads(out.read_text())
    exact = expected["machine"] == actual["machine"]
    if not exact:
        print(f"recorded on {expected['machine']}, running on {actual['machine']}: rtol 1e-5, no weights hash")
    assert set(actual["runs"]) == set(expected["runs"]) == {"grpo", "dagrpo", "tagrpo"}
    for name, recorded in expected["runs"].items():
        problems = _differences(recorded, actual["runs"][name], exact=exact)
        assert not problems, f"golden run {name!r} changed:\n" + "\n".join(problems[:20])


def test_the_comparison_catches_a_changed_number():
    recorded = json.loads((GOLDEN / "runs.json").read_text())["runs"]["grpo"]
    changed = json.loads(json.dumps(recorded))
    changed["metrics"][1]["a new metric"] = 1.0
    assert not _differences(recorded, changed, exact=True)  # added: nothing recorded changed
    del changed["metrics"][1]["train/grad_norm"]
    assert _differences(recorded, changed, exact=True)  # a recorded one gone is a change
    changed["metrics"][1]["train/grad_norm"] = recorded["metrics"][1]["train/grad_norm"]
    changed["metrics"][1]["train/loss"] = recorded["metrics"][1]["train/loss"] * (1 + 1e-12)
    assert _differences(recorded, changed, exact=True)
    assert not _differences(recorded, changed, exact=False)
    changed["weights_sha256"] = "0" * 64
    assert any("weights" in p for p in _differences(recorded, changed, exact=True))
