"""benchmarks/gpu_check.py's dry run: the GPU check's whole path on tiny shapes on this CPU, in rlvr's environment.

The same command runs on the lent GPU machine with the kit (docs/scaling.md, "The GPU check"); this keeps
it runnable between GPU loans. The dry run uses the GPU's own options (bf16 autocast over fp32 master
weights, gradient checkpointing in both trainers, the chunked head, micro-batches of a quarter of the step)
and an emulated accelerator (rlvr.parallel.device_check): a tensor left on the host that meets the model's
fails here as it would on CUDA. It checks the code path and what the JSON holds, not a speed.
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
    folder = tmp_path_factory.mktemp("gpu_check")
    tiny_random_model_and_tokenizer(0)[1].save_pretrained(folder / "tokenizer")  # the kit's is SmolLM2's
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--tokenizer",
                           str(folder / "tokenizer"), "--out", str(folder / "out"), "--profile"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads((folder / "out" / "gpu_check.json").read_text())


def test_every_part_runs_and_is_reported(dry_run):
    """All six parts end 'done'; the table names each and the JSON holds the environment."""
    stdout, report = dry_run
    assert {part: r["status"] for part, r in report["results"].items()} == dict.fromkeys(
        ["grpo", "trl", "dagrpo", "tagrpo", "memory7b", "options"], "done")
    assert report["environment"]["device"] == "cpu" and report["environment"]["trl"]
    assert "rlvr/TRL seconds per step" in stdout and "wrote" in stdout


def test_responses_have_a_fixed_length_and_every_step_updates(dry_run):
    """EOS ignored in both trainers (16 tokens each), a reward that varies in groups: a finite loss and a
    non-zero gradient in every rlvr step; DaGRPO put an anchor in every group."""
    results = dry_run[1]["results"]
    for part in ("grpo", "trl", "dagrpo", "tagrpo"):
        assert [s["completions/mean_length"] for s in results[part]["steps"]] == [16.0] * len(results[part]["steps"])
    for part in ("grpo", "dagrpo", "tagrpo"):
        assert all(s["train/grad_norm"] > 0 for s in results[part]["steps"])
    assert len(results["grpo"]["steps"]) == 2 and results["grpo"]["timed_steps"] == 1
    assert results["dagrpo"]["steps"][0]["dagrpo/anchor_rate"] == 1.0
    assert results["tagrpo"]["steps"][0]["tagrpo/variants_per_pool"] == 3.0  # q_0 and 2 rephrasings


def test_the_trl_loss_check_agrees(dry_run):
    """bench_step's check on TRL's first batch, with TRL's gradient checkpointing on (its model then drops the KV
    cache: rlvr scores unshared) and both under bf16 autocast: log-probs within bf16's rounding (1e-3 measured),
    gradients parallel."""
    check = dry_run[1]["results"]["trl"]["loss_check"]
    assert check["max_abs_logp_diff"] < 5e-3 and check["grad_cosine"] > 0.9999


def test_the_dry_run_uses_the_gpu_settings_on_the_emulated_accelerator(dry_run):
    """Every rlvr part ran with the GPU run's memory and precision stack, on the emulated accelerator."""
    for part in ("grpo", "dagrpo", "tagrpo"):
        settings = dry_run[1]["results"][part]["settings"]
        assert settings == {"dtype": "float32", "bf16": True, "gradient_checkpointing": True,
                            "lm_head_chunk_tokens": 8, "per_device_train_batch_size": 2, "device": "cpu:0"}, part
    assert [r["responses"] for r in dry_run[1]["results"]["tagrpo"]["rollouts"]] == [24]  # the pool in one go
    assert "aten::" in dry_run[1]["results"]["grpo"]["rollout_profile"]  # --profile: the first rollout's operations


def test_memory_parts_compare_with_the_documented_prediction(dry_run):
    """The 7B part reads docs/scaling.md's row from memory_fit's JSON; the options part has each option once."""
    results = dry_run[1]["results"]
    assert results["memory7b"]["predicted_row"] == "7B full, dtype=bfloat16, β = 0, n = 4, T = 1024, none"
    assert results["memory7b"]["predicted_gib"] == pytest.approx(94.28, abs=0.01)
    assert "94.3" in (ROOT / "docs" / "scaling.md").read_text()  # the table the prediction comes from
    options = results["options"]["options"]
    assert list(options) == ["plain bf16", "+gradient_checkpointing", "+lm_head_chunk_tokens=1024", "+lora_r=16",
                             "bf16=true (fp32 master)"]
    assert options["plain bf16"]["time_vs_plain"] == 1.0 and all(row["responses"] == 16 for row in options.values())


def test_without_cuda_it_exits_2_naming_the_cpu_option(tmp_path):
    """On a machine without CUDA the default device refuses in one line that names --device cpu."""
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has CUDA")
    tokenizer = tmp_path / "tok"
    tiny_random_model_and_tokenizer(0)[1].save_pretrained(tokenizer)
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--tokenizer", str(tokenizer), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 2 and "--device cpu" in proc.stderr


def test_a_part_past_its_budget_is_killed_whole_and_says_where_it_stood(tmp_path):
    """A part in its own process group past its budget (here: 20 000 tokens to decode in 20 s) is killed with
    everything it started, whatever its code catches; the JSON says 'cut' and holds its last stack dump."""
    tokenizer = tmp_path / "tok"
    tiny_random_model_and_tokenizer(0)[1].save_pretrained(tokenizer)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--tokenizer", str(tokenizer),
                           "--out", str(tmp_path / "out"), "--parts", "grpo", "--budget-s", "20",
                           "--completion-length", "20000"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # a cut is no failure
    record = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["results"]["grpo"]
    assert record["status"] == "cut" and 20 <= record["wall_s"] < 60
    assert "gpu_check.py" in record["last_stacks"] and not (tmp_path / "out" / "stacks-grpo.txt").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(record["pid"], 0)  # the part's process is gone


def test_the_gpu_plan_fits_each_command_and_names_the_split(tmp_path):
    """At the GPU's settings the six parts' budgets pass one command's 600 s: the plan is cut into commands that
    each fit, in the parts' order, and each part's estimate covers what the H200 run measured (2026-12-04, T = 512:
    grpo 117 s, trl 120 s, dagrpo 73 s, tagrpo 66 s, memory7b 20 s of wall time)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    tiny_random_model_and_tokenizer(0)[1].save_pretrained(tmp_path / "tokenizer")
    args = gpu_check.parse_args(["--out", str(tmp_path / "out"), "--tokenizer", str(tmp_path / "tokenizer")])
    plan = gpu_check.estimates(args)
    runs = gpu_check.split_parts(args, plan)
    assert [p for run in runs for p in run] == list(gpu_check.PARTS)
    assert all(sum(plan[p]["budget_s"] for p in run) <= gpu_check.COMMAND_LIMIT_S for run in runs)
    assert len(runs) == 2
    measured = {"grpo": 117, "trl": 120, "dagrpo": 73, "tagrpo": 66, "memory7b": 20}
    assert all(plan[p]["estimate_s"] >= seconds for p, seconds in measured.items())
