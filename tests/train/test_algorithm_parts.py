"""A researcher's own estimator, loss and aggregation from a file or a callable (rlvr.train.algorithm_parts,
docs/extending.md): the worked example run from the command line, the signature checks, the Python API."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.config import build_config
from rlvr.core.advantages import ADVANTAGE_ESTIMATORS
from rlvr.core.losses import AGGREGATIONS, POLICY_LOSSES, clip
from rlvr.core.names import ADVANTAGE_ESTIMATOR_NAMES, AGGREGATION_MODES, POLICY_LOSS_NAMES
from rlvr.train.plan import compile_plan
from rlvr.train.trainer import Trainer
from tests.run.cli_runs import ENV, last_line

ROOT = Path(__file__).resolve().parents[2]
ALTERNATING = "def alternating(prompts, completions, **kwargs):\n    return [float(i % 2) for i in range(len(completions))]\n"
EPS = 1e-6


@pytest.fixture(autouse=True)
def restore_registries():
    """The functions registered under their specs are dropped after each test."""
    saved = [(registry, registry.copy()) for registry in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, AGGREGATIONS,
                                                          ADVANTAGE_ESTIMATOR_NAMES, POLICY_LOSS_NAMES)]
    modes = list(AGGREGATION_MODES)
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)
    AGGREGATION_MODES[:] = modes


def worked_example() -> str:
    """The first python block of docs/extending.md: the file the docs tell a user to write."""
    return re.search(r"```python\n(.*?)```", (ROOT / "docs/extending.md").read_text(), re.DOTALL).group(1)


def rfpp_by_hand(records: list[dict]) -> list[float]:
    """REINFORCE++-baseline from the logged rewards: r − group mean, whitened over the batch (unbiased std + ε)."""
    groups: dict[int, list[float]] = {}
    for r in records:
        groups.setdefault(r["group_id"], []).append(r["reward"])
    centred = [r["reward"] - sum(groups[r["group_id"]]) / len(groups[r["group_id"]]) for r in records]
    mean = sum(centred) / len(centred)
    std = math.sqrt(sum((c - mean) ** 2 for c in centred) / (len(centred) - 1))
    return [(c - mean) / (std + EPS) for c in centred]


def tiny_command(run: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", "train", "model=tiny-random", "data=rg:basic_arithmetic:size=64",
            "max_steps=1", "prompts_per_step=2", "num_generations=4", "max_completion_length=8",
            "progress_bar=false", "verifier_workers=1", "num_completions_to_log=8", "reward_funcs=alternating.py:alternating",
            f"output_dir={run}", *extra]


@pytest.mark.slow
def test_the_worked_example_trains_a_step_from_the_command_line(tmp_path):
    """docs/extending.md's my_algos.py, written as the docs say, named on the command line: one step whose
    logged advantages are REINFORCE++-baseline's (±0.9354 for rewards 0,1,0,1 in both groups: GRPO gives ±0.866)."""
    (tmp_path / "my_algos.py").write_text(worked_example())
    (tmp_path / "alternating.py").write_text(ALTERNATING)
    run = tmp_path / "run"
    done = subprocess.run(tiny_command(run, "advantage_estimator=my_algos.py:rfpp_baseline"), check=False, cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 8
    assert [r["advantage"] for r in records] == pytest.approx(rfpp_by_hand(records), rel=1e-5, abs=1e-6)
    # 0,1,0,1 per group: centred ±0.5, batch std sqrt(8·0.25/7)
    assert [abs(r["advantage"]) for r in records] == pytest.approx([0.5 / math.sqrt(2 / 7)] * 8, rel=1e-5)
    assert "advantage_estimator: my_algos.py:rfpp_baseline" in (run / "config.yaml").read_text()


BAD = '''
def one_argument(inputs):
    return inputs.rewards


def keyword_only(logprobs, old_logprobs, advantages, mask, *, settings):
    return logprobs, mask


not_a_function = 3
'''


def test_a_wrong_signature_is_one_line_from_the_dry_run(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "alternating.py").write_text(ALTERNATING)
    done = subprocess.run([*tiny_command(tmp_path / "run", "advantage_estimator=bad.py:one_argument"), "--dry-run"], check=False,
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    line = last_line(done.stderr)
    assert "advantage_estimator=bad.py:one_argument takes one_argument(inputs)" in line
    assert "expected fn(inputs, settings) -> advantages [N]" in line
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("option", "spec", "error", "expected"), [
    ("policy_loss", "bad.py:keyword_only", ValueError, r"expected fn\(logprobs, old_logprobs, advantages, mask, settings\)"),
    ("loss_type", "bad.py:one_argument", ValueError, r"expected fn\(per_token, mask, denominators\)"),
    ("advantage_estimator", "bad.py:not_a_function", ValueError, r"is a int, not a function; expected fn\(inputs"),
    ("advantage_estimator", "bad.py:missing", ValueError, "has no attribute 'missing'"),
    ("policy_loss", "nowhere.py:fn", ValueError, "file 'nowhere.py' not found"),
    ("loss_type", "python:__main__.fn", ValueError, "pass the callable itself to build_config again"),
])
def test_each_family_checks_its_signature_at_start_up(tmp_path, monkeypatch, option, spec, error, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text(BAD)
    cfg = build_config({"model": "tiny-random", option: spec})  # the config checks the form only (no torch)
    with pytest.raises(error, match=expected):
        compile_plan(cfg)


def test_an_unknown_name_lists_the_names_and_the_function_forms():
    registered = re.escape(str(sorted(ADVANTAGE_ESTIMATOR_NAMES)))  # (the registry's names, whatever is added)
    with pytest.raises(ValueError, match=rf"choose one of {registered}, or your own function: "
                                         r"path/to/file.py:function"):
        build_config({"model": "tiny-random", "advantage_estimator": "rfpp_baseline"})
    with pytest.raises(ValueError, match="or your own function"):
        build_config({"model": "tiny-random", "loss_type": "nope"})
    # a file without its function is no function spec (it was taken as module "my", attribute "py" at start-up)
    with pytest.raises(ValueError, match="advantage_estimator.*or your own function: path/to/file.py:function"):
        build_config({"model": "tiny-random", "advantage_estimator": "my_algos.py"})


@pytest.mark.slow
def test_callables_from_the_python_api_train_a_step(tmp_path):
    """Each of the three as a callable in build_config: each is called in the step, with its family's arguments."""
    calls: dict[str, int] = {"advantages": 0, "loss": 0, "aggregation": 0}

    def halved_grpo(inputs, settings):
        calls["advantages"] += 1
        return 0.5 * ADVANTAGE_ESTIMATORS["grpo"](inputs, settings)

    def my_clip(logprobs, old_logprobs, advantages, mask, settings):
        calls["loss"] += 1
        return clip(logprobs, old_logprobs, advantages, mask, settings)

    def my_token_sum(per_token, mask, denominators):
        calls["aggregation"] += 1
        return (per_token * mask).sum() / max(float(denominators.num_tokens), 1.0)

    reward = tmp_path / "alternating.py"
    reward.write_text(ALTERNATING)
    cfg = build_config({"model": "tiny-random", "data": "rg:basic_arithmetic:size=64", "max_steps": 1,
                        "prompts_per_step": 2, "num_generations": 4, "max_completion_length": 8,
                        "output_dir": str(tmp_path / "run"), "progress_bar": False, "verifier_workers": 1,
                        "num_completions_to_log": 8, "reward_funcs": [f"{reward}:alternating"],
                        "advantage_estimator": halved_grpo, "policy_loss": my_clip, "loss_type": my_token_sum})
    assert cfg.algorithm.advantage_estimator.startswith("python:") and cfg.algorithm.advantage_estimator.endswith(
        "halved_grpo")
    (m,) = Trainer(cfg).train()
    # each once at start-up on the synthetic batch (rlvr.train.algorithm_part_checks), then in the step
    assert calls["advantages"] == 2 and calls["loss"] >= 2 and calls["aggregation"] == calls["loss"]
    records = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert [abs(r["advantage"]) for r in records] == pytest.approx([0.5 * math.sqrt(3) / 2] * 8, rel=1e-5)
    assert math.isfinite(m["train/loss"]) and m["train/grad_norm"] > 0
