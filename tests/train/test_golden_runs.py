"""The trainer's numerics are pinned: three golden runs (grpo with β and 2 mini-batches, dagrpo with
anchors, tagrpo with pools and truncated IS) reproduce the recorded metrics, samples and final weights.

Recorded by ``tests/train/golden/record.py --write``, so a refactoring that changes a number fails here.
Where the machine's identity (``record.machine()``: the kernels the numbers come from — torch's CPU
capability, the CPU vendor and instruction-set flags MKL and oneDNN dispatch on, their builds, the
variables overriding their dispatch, threads, python/torch/transformers) equals the recording's, the
comparison is exact and includes the weights' hash. Elsewhere other kernels sum in another order
(~1e-7 per step), so metrics are compared at rtol 1e-5 (abs 1e-7) and, per tensor, the norm of what
training changed at rtol 1e-4 (measured: 2.7e-5 at most between this machine's AVX-512 kernels and its
AVX2 ones, ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2``); the test prints which comparison
ran. Keys a run has and the recording has not (metrics added since) are not compared; a recorded key a run
lacks is a change.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


METRIC_RTOL, UPDATE_RTOL = 1e-5, 1e-4


def _close(a, b, *, exact: bool) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not exact:
        return math.isclose(a, b, rel_tol=METRIC_RTOL, abs_tol=1e-7)
    return a == b


def comparison(recorded_machine: dict, this_machine: dict) -> str:
    """'exact' where every part of the identity that selects the kernels is the recording's, else 'tolerance'."""
    return "exact" if recorded_machine == this_machine else "tolerance"


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
    want, got = expected["update_norms"], actual.get("update_norms", {})
    for name in sorted(want):
        same = want[name] == got.get(name) if exact else (
            name in got and math.isclose(want[name], got[name], rel_tol=UPDATE_RTOL))
        if not same:
            out.append(f"update_norms[{name}]: {got.get(name, '<missing>')!r}, recorded {want[name]!r}")
    return out


@pytest.mark.slow
def test_golden_runs_reproduce_the_recorded_numbers(tmp_path):
    out = tmp_path / "runs.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(GOLDEN / "record.py"), "--out", str(out)], env=env, check=True,
                   capture_output=True, timeout=600)
    expected, actual = json.loads((GOLDEN / "runs.json").read_text()), json.loads(out.read_text())
    exact = comparison(expected["machine"], actual["machine"]) == "exact"
    if exact:
        print("this machine's identity is the recording's: exact comparison, weights hash included")
    else:
        differs = {k: (expected["machine"].get(k), v) for k, v in actual["machine"].items() if expected["machine"].get(k) != v}
        print(f"identity differs from the recording's in {differs}: metrics at rtol {METRIC_RTOL}, update norms at "
              f"rtol {UPDATE_RTOL}, no weights hash")
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


def test_another_machine_identity_takes_the_tolerance_path():
    """A run from a machine whose kernels differ (a faked identity: AVX2 instead of AVX-512) with ~1e-7 float
    differences and another weights hash passes at the stated tolerance; the same differences on the
    recording's identity fail; a difference beyond the tolerance fails on both."""
    recorded_file = json.loads((GOLDEN / "runs.json").read_text())
    recorded, machine = recorded_file["runs"]["grpo"], recorded_file["machine"]
    other = {**machine, "cpu_capability": "AVX2"}
    assert comparison(machine, dict(machine)) == "exact" and comparison(machine, other) == "tolerance"
    rerun = json.loads(json.dumps(recorded))
    rerun["metrics"][1]["train/loss"] *= 1 + 3e-7
    name = min(rerun["update_norms"])
    rerun["update_norms"][name] *= 1 + 3e-5
    rerun["weights_sha256"] = "0" * 64
    assert not _differences(recorded, rerun, exact=comparison(machine, other) == "exact")
    assert len(_differences(recorded, rerun, exact=comparison(machine, dict(machine)) == "exact")) == 3
    rerun["update_norms"][name] *= 1 + 1e-3  # beyond UPDATE_RTOL: an update that changed
    assert _differences(recorded, rerun, exact=False) == [
        f"update_norms[{name}]: {rerun['update_norms'][name]!r}, recorded {recorded['update_norms'][name]!r}"]
