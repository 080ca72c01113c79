"""benchmarks/bench_decode.py's dry run: the GPU decoding benchmark's whole path on tiny shapes on this CPU.

The same command runs on a lent GPU (docs/scaling.md, "The decoding benchmark"); this keeps it runnable between
loans. It checks the code path and what the JSON holds, not a speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.models.tiny import tiny_random_model_and_tokenizer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_decode")
    tiny_random_model_and_tokenizer(0)[1].save_pretrained(folder / "tokenizer")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/bench_decode.py", "--device", "cpu", "--tokenizer",
                           str(folder / "tokenizer"), "--out", str(folder / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads((folder / "out" / "bench_decode.json").read_text())


def test_every_setting_runs_and_is_reported(dry_run):
    stdout, report = dry_run
    assert {name: r["status"] for name, r in report["results"].items()} == dict.fromkeys(
        ["forward", "eager", "compile", "update-ckpt", "update", "update-bf16"], "done")
    assert "ms/pos" in stdout and "MFU" in stdout and "wrote" in stdout


def test_decoding_settings_do_fixed_work_and_report_the_roofline_numbers(dry_run):
    """Every row decodes all T = 16 tokens (EOS never drawn) in each setting; the per-position time, the bytes a
    step must move and the first rollout are there; the static settings use the static step, forward does not."""
    results = dry_run[1]["results"]
    for name in ("forward", "eager", "compile"):
        r = results[name]
        assert r["all_full"] and r["rows"] == 8 and len(r["tokens"]) == 8, name
        assert r["ms_per_position"] > 0 and r["must_move_gb"] > 0 and r["roofline"] > 0 and r["first_s"] > 0, name
    assert results["forward"]["options"] == {"fused": False, "compact_below": 0}
    # the host's work per position: the static step dispatches fewer operations than the model's forward
    assert 0 < results["eager"]["operations_per_position"] < results["forward"]["operations_per_position"]
    assert results["compile"]["options"] == {"capture": "compile", "compact_below": 0, "kv_bucket": 8}


def test_update_settings_report_tokens_per_second_and_mfu(dry_run):
    results = dry_run[1]["results"]
    for name in ("update-ckpt", "update", "update-bf16"):
        r = results[name]
        assert r["update_s"] > 0 and r["update_tokens_per_s"] > 0 and 0 < r["mfu"] < 1, name
    settings = {name: results[name]["settings"] for name in ("update-ckpt", "update", "update-bf16")}
    assert (settings["update-ckpt"]["gradient_checkpointing"], settings["update"]["gradient_checkpointing"]) == (True, False)
    assert (settings["update-ckpt"]["dtype"], settings["update-ckpt"]["bf16"]) == ("float32", True)
    assert (settings["update-bf16"]["dtype"], settings["update-bf16"]["bf16"]) == ("bfloat16", False)


def test_graph_settings_are_refused_on_a_cpu_with_the_reason():
    proc = subprocess.run([sys.executable, "benchmarks/bench_decode.py", "--device", "cpu", "--settings", "graph",
                           "--out", "/tmp/unused"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "record CUDA graphs" in proc.stderr
