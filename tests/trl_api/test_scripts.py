"""TRL's Python scripts with only their import line changed run on rlvr (``from rlvr import GRPOTrainer``).

Each script runs in a fresh interpreter, as a user's does: TRL's quickstart (docs: "Quick start": a model
name, ``trl.rewards.accuracy_reward``, a dataset, ``train()``) and a script with ``GRPOConfig(...)``,
callbacks, ``evaluate()``, ``save_model()`` and ``train(resume_from_checkpoint=True)``. The model is the
tiny random one saved to a folder and the dataset a local one (offline).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tiny_model import save_tiny_model

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

ROOT = Path(__file__).resolve().parents[2]

QUICKSTART = '''
from datasets import Dataset
from trl import GRPOTrainer
from trl.rewards import accuracy_reward

dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
                              "solution": f"${2 * i}$"} for i in range(8)])

trainer = GRPOTrainer(
    model=MODEL,
    reward_funcs=accuracy_reward,
    train_dataset=dataset,
)
trainer.train()
'''


def _run(script: str, folder: Path, model: Path, *, trl: bool = False) -> subprocess.CompletedProcess:
    text = script.replace("MODEL", repr(str(model)))
    if not trl:
        text = text.replace("from trl import GRPOTrainer", "from rlvr import GRPOTrainer")
        text = text.replace("from trl import GRPOConfig, GRPOTrainer", "from rlvr import GRPOConfig, GRPOTrainer")
    (folder / "script.py").write_text(text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "script.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_trls_quickstart_runs_with_the_import_changed(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    script = QUICKSTART.replace("trainer = GRPOTrainer(", "from rlvr import GRPOConfig\ntrainer = GRPOTrainer(args="
                                "GRPOConfig(output_dir='out', max_steps=2, max_completion_length=8, num_generations=4, "
                                "per_device_train_batch_size=4, report_to='none'),")
    proc = _run(script, tmp_path, model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TRL 1.16's defaults and semantics apply" in proc.stderr, "the start-up line must reach the console"
    state = json.loads(next((tmp_path / "out").glob("checkpoint-*/trainer_state.json")).read_text())
    assert state["global_step"] == 2
    assert not any((tmp_path / "out").glob("*.safetensors")), "no save_model() call: TRL leaves no model at the top"


SCRIPT = '''
import json, sys
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

seen = []
def reward(completions, idx, **kwargs):
    seen.append(list(idx))
    return [float(len(str(c)) % 3) for c in completions]

events = []
class Events(TrainerCallback):
    def on_train_begin(self, args, state, control, **kw): events.append("train_begin")
    def on_step_end(self, args, state, control, **kw): events.append(f"step_end {state.global_step}")
    def on_log(self, args, state, control, logs=None, **kw): events.append("log")
    def on_save(self, args, state, control, **kw): events.append(f"save {state.global_step}")
    def on_evaluate(self, args, state, control, metrics=None, **kw):
        events.append(f"evaluate {state.global_step} {sorted(k for k in metrics if k.startswith('eval_l'))}")
    def on_train_end(self, args, state, control, **kw): events.append(f"train_end {state.global_step}")

rows = [{"prompt": f"Question {i}: what is {i} + 1?", "idx": i} for i in range(12)]  # no gold: TRL needs none
args = GRPOConfig(output_dir="out", max_steps=MAX_STEPS, per_device_train_batch_size=4, num_generations=4,
                  gradient_accumulation_steps=2, max_completion_length=6, learning_rate=1e-3, logging_steps=1,
                  save_steps=1, shuffle_dataset=False, report_to="none", seed=3, USE_CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                      eval_dataset=Dataset.from_list(rows[:2]), callbacks=[Events()])
trainer.train(resume_from_checkpoint=RESUME)
metrics = trainer.evaluate() if EVALUATE else {}
trainer.save_model("saved")
print(json.dumps({"seen": seen, "events": events, "global_step": trainer.state.global_step,
                  "log_steps": [line.get("step") for line in trainer.state.log_history if "loss" in line],
                  "eval": metrics}))
'''


def _script(max_steps: int, *, resume: bool = False, evaluate: bool = True, trl: bool = False) -> str:
    return (SCRIPT.replace("MAX_STEPS", str(max_steps)).replace("RESUME", "True" if resume else "None")
            .replace("EVALUATE", str(evaluate)).replace(", USE_CPU", ", use_cpu=True" if trl else ""))


def _result(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_trl_script_side_by_side_with_trls_own_trainer(tmp_path):
    """The same script under TRL and under rlvr: the same prompts (by their ``idx`` column) in the same
    reward calls, the same global steps, a log line per optimiser step."""
    model = save_tiny_model(tmp_path / "model")
    (tmp_path / "trl").mkdir()
    (tmp_path / "rlvr").mkdir()
    theirs = _result(_run(_script(2, evaluate=False, trl=True), tmp_path / "trl", model, trl=True))
    ours = _result(_run(_script(2, evaluate=False), tmp_path / "rlvr", model))
    assert ours["seen"] == theirs["seen"]
    assert ours["global_step"] == theirs["global_step"] == 2
    assert ours["log_steps"] == theirs["log_steps"]
    assert (tmp_path / "rlvr" / "saved" / "config.json").is_file()


def test_callbacks_evaluate_and_resume(tmp_path):
    model = save_tiny_model(tmp_path / "model")
    first = _result(_run(_script(2), tmp_path, model))
    assert first["events"][0] == "train_begin" and first["events"][-3].startswith("train_end 2")
    assert "step_end 1" in first["events"] and "save 2" in first["events"] and "log" in first["events"]
    assert first["events"][-2:] == ["log", "evaluate 2 ['eval_loss']"]  # evaluate(): on_log, then on_evaluate
    assert first["eval"]["eval_rewards/reward/mean"] is not None and first["eval"]["eval_completions/mean_length"] > 0
    resumed = _result(_run(_script(3, resume=True, evaluate=False), tmp_path, model))
    assert resumed["global_step"] == 3
    assert resumed["seen"] == [[4] * 4 + [5] * 4], "step 3 takes the prompts after steps 1-2's (0-3), in order"


def test_a_trl_config_object_and_evaluation_during_training(tmp_path):
    """``from trl import GRPOConfig`` kept (TRL's own config object, built as a CPU user must: use_cpu=True) with
    rlvr's trainer; ``eval_strategy: steps`` evaluates eval_dataset every ``eval_steps`` optimiser steps, each an
    entry of its own (evaluations.jsonl, merged into log_history), not in the step's metrics.jsonl line
    (tests/conformance/test_trl_evaluation.py compares the entries with TRL's)."""
    model = save_tiny_model(tmp_path / "model")
    script = (_script(2, evaluate=False, trl=True).replace("from trl import GRPOConfig, GRPOTrainer",
                                                           "from trl import GRPOConfig\nfrom rlvr import GRPOTrainer")
              .replace("seed=3,", "seed=3, eval_strategy='steps', eval_steps=1,"))
    result = _result(_run(script, tmp_path, model, trl=True))
    assert result["global_step"] == 2
    assert [e for e in result["events"] if e.startswith("evaluate")] == [f"evaluate {step} ['eval_loss']"
                                                                         for step in (1, 2)]
    lines = [json.loads(line) for line in (tmp_path / "out" / "evaluations.jsonl").read_text().splitlines()]
    assert [(line["step"], line["log"]["step"]) for line in lines] == [(1, 1), (2, 2)]
    assert all(line["log"]["eval_reward"] is not None and "eval_rewards/reward/mean" in line["log"] for line in lines)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert not any(key.startswith("eval") for line in metrics for key in line)
