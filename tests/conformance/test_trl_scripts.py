"""A TRL user's logs, exactly as TRL writes them: six scripts written the way TRL 1.16's docs write them, each run
under TRL (its own ``GRPOTrainer``) and under rlvr (only the import line changed), in this process, on the tiny model
with ``report_to=["tensorboard"]``.

Generation is the only thing replaced on either side, as in test_trl_training_step.py: TRL's
``_generate_single_turn`` and rlvr's engine return the same fixed completion token ids (``FixedCompletions``; TRL's
shuffle of a generation batch is the identity), so both see the same prompts and completions. Compared:

- ``trainer.state.log_history``: the same entries at the same steps with the same keys (rlvr's own keys only under
  ``rlvr/``, a prefix TRL does not use); the values that follow from the prompts and completions alone (rewards,
  a reward's ``log_metric``, completion lengths, token counts, the learning rate, epoch) equal. The loss and the
  metrics of the policy's log-probs are compared number by number in test_trl_training_step.py;
- the TensorBoard event files: the same scalar tags, each at the same steps;
- ``train()``'s ``TrainOutput``: its global step and its metrics' keys;
- a ``TrainerCallback``'s ``on_step_end`` steps and ``on_log`` calls (their step and keys);
- the keyword arguments a reward function gets: TRL's, and the dataset's columns as they are (no ``answer`` or ``id``
  that the dataset lacks).

Evaluation entries (``eval_*``) are left out here: test_trl_evaluation.py compares them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.tiny_model import save_tiny_model

from .test_trl_training_step import FixedCompletions, FixedEngine

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")
pytest.importorskip("tensorboard", reason="tensorboard is in the tensorboard extra (make setup installs it)")

# what every script passes to GRPOConfig besides its own options: a CPU user's (TRL's bf16 and gradient
# checkpointing defaults are for GPUs), both sides taking the prompts in order, 4 completions of at most 8 tokens
# (test_trl_training_step's fixed completions), TensorBoard
CPU = ("use_cpu=True, bf16=False, gradient_checkpointing=False, shuffle_dataset=False, seed=5, "
       "per_device_train_batch_size=4, num_generations=4, max_completion_length=8, report_to=['tensorboard']")

CUSTOM_REWARD = '''
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

seen = []  # the keyword arguments each reward call got

# Reward completions close to 20 characters (TRL's quick start)
def reward_len(completions, **kwargs):
    seen.append(sorted(kwargs))
    return [-abs(20 - len(completion)) for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Question {i}: what is {i} + 1?"} for i in range(8)])
training_args = GRPOConfig(output_dir=OUT, max_steps=3, skip_memory_metrics=False, CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, args=training_args, train_dataset=dataset)
output = trainer.train()
'''

LORA = '''
from datasets import Dataset
from peft import LoraConfig
from trl import GRPOConfig, GRPOTrainer

def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Write about {topic}."} for topic in ("cats", "rain", "tea", "maps")])
peft_config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                         task_type="CAUSAL_LM")
training_args = GRPOConfig(output_dir=OUT, max_steps=2, logging_steps=1, learning_rate=1e-4, CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, args=training_args, train_dataset=dataset,
                      peft_config=peft_config)
output = trainer.train()
'''

CONVERSATIONAL = '''
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

seen = []  # the keyword arguments each reward call got

def format_reward(completions, **kwargs):
    seen.append(sorted(kwargs))
    return [1.0 if completion[0]["content"].strip() else 0.0 for completion in completions]

def digits_reward(completions, answer, log_metric, **kwargs):
    contents = [completion[0]["content"] for completion in completions]
    log_metric("digits/fraction", sum(any(c.isdigit() for c in text) for text in contents) / len(contents))
    return [float(sum(c.isdigit() for c in text) > 0) + (text.strip() == gold) for text, gold in zip(contents, answer)]

dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": "Answer with a number."},
                                         {"role": "user", "content": f"What is {i} + {i}?"}],
                              "answer": str(2 * i)} for i in range(8)])
training_args = GRPOConfig(output_dir=OUT, max_steps=3, logging_steps=2, logging_first_step=True,
                           reward_weights=[0.5, 1.0], CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=[format_reward, digits_reward], args=training_args,
                      train_dataset=dataset)
output = trainer.train()
'''

EVALUATION = '''
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]

class Recorder(TrainerCallback):
    def __init__(self):
        self.steps, self.logs = [], []
    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)
    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, sorted(logs)))

rows = [{"prompt": f"Question {i}: what is {i} + 1?"} for i in range(8)]
recorder = Recorder()
training_args = GRPOConfig(output_dir=OUT, max_steps=2, logging_steps=1, CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, args=training_args, train_dataset=Dataset.from_list(rows),
                      eval_dataset=Dataset.from_list(rows[:4]), callbacks=[recorder])
output = trainer.train()
metrics = trainer.evaluate()
'''

RESUME = '''
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Question {i}: what is {i} + 1?"} for i in range(8)])
first = GRPOTrainer(model=MODEL, reward_funcs=reward_len, train_dataset=dataset,
                    args=GRPOConfig(output_dir=OUT, max_steps=2, logging_steps=1, save_steps=2, CPU))
first.train()
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, train_dataset=dataset,
                      args=GRPOConfig(output_dir=OUT, max_steps=3, logging_steps=1, save_steps=2, CPU))
output = trainer.train(resume_from_checkpoint=True)
'''

ITERATIONS = '''
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]

dataset = Dataset.from_list([{"prompt": f"Question {i}: what is {i} + 1?"} for i in range(8)])
# two optimiser steps per generation (num_iterations=2), an entry every two
training_args = GRPOConfig(output_dir=OUT, max_steps=4, num_iterations=2, logging_steps=2,
                           include_num_input_tokens_seen=True, CPU)
trainer = GRPOTrainer(model=MODEL, reward_funcs=reward_len, args=training_args, train_dataset=dataset)
output = trainer.train()
'''

SCRIPTS = {"custom-reward": CUSTOM_REWARD, "lora": LORA, "conversational-two-rewards": CONVERSATIONAL,
           "eval-callback": EVALUATION, "resume": RESUME, "num_iterations-logging_steps": ITERATIONS}

# log_history values that follow from the prompts and fixed completions alone (not from the policy's log-probs)
DETERMINED = ("reward", "reward_std", "frac_reward_zero_std", "num_tokens", "num_input_tokens_seen", "epoch",
              "learning_rate", "digits/fraction")
DETERMINED_PREFIXES = ("rewards/", "completions/")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("model") / "tiny", max_positions=256)


def run_script(script: str, side: str, folder: Path, model: Path, monkeypatch) -> dict:
    """The script's namespace after running it as ``side`` (trl, or rlvr: the import line changed)."""
    text = script.replace(", CPU)", f", {CPU})")
    if side == "rlvr":
        text = text.replace("from trl import GRPOConfig, GRPOTrainer", "from rlvr import GRPOConfig, GRPOTrainer")
    fixed = FixedCompletions(all_truncated=False)
    if side == "trl":
        import trl
        import trl.trainer.grpo_trainer as grpo

        monkeypatch.setattr(trl.GRPOTrainer, "_generate_single_turn",
                            lambda self, prompt_ids, *args, **kwargs: (fixed(prompt_ids), None))
        monkeypatch.setattr(grpo, "shuffle_sequence_dict", lambda batch: batch)  # micro-batch k: the batch's group k
    else:
        import rlvr.train.setup as setup_module

        build_engine = setup_module.build_engine
        monkeypatch.setattr(setup_module, "build_engine", lambda *a, **kw: FixedEngine(build_engine(*a, **kw), fixed))
    namespace = {"MODEL": str(model), "OUT": str(folder / "out"), "__name__": "__main__"}
    monkeypatch.chdir(folder)
    exec(compile(text, f"{side}_script.py", "exec"), namespace)  # noqa: S102  (the test's own scripts)
    monkeypatch.undo()
    return namespace


def is_evaluation(entry: dict) -> bool:
    return any(key.startswith("eval_") for key in entry)


def trl_keys(entry: dict) -> list[str]:
    """An rlvr entry's keys but its own (``rlvr/``), every key of a TRL entry."""
    return sorted(key for key in entry if not key.startswith("rlvr/"))


def assert_same_log_history(theirs: list[dict], ours: list[dict]) -> None:
    theirs = [e for e in theirs if not is_evaluation(e)]  # eval entries: see test_trl_evaluation.py
    ours = [e for e in ours if not is_evaluation(e)]
    assert [e["step"] for e in ours] == [e["step"] for e in theirs]
    for mine, trl in zip(ours, theirs, strict=True):
        assert trl_keys(mine) == trl_keys(trl), f"step {trl['step']}: {set(trl_keys(mine)) ^ set(trl_keys(trl))}"
        for key, value in trl.items():
            if key in DETERMINED or key.startswith(DETERMINED_PREFIXES):
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    assert mine[key] is None or math.isnan(mine[key]), (trl["step"], key)
                else:
                    assert mine[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (trl["step"], key, mine[key], value)


def tensorboard_steps(folder: Path) -> dict[str, list[int]]:
    """Every scalar tag of the event files under ``folder`` (a resumed run writes a second) -> its steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[str, set[int]] = {}
    files = sorted(folder.rglob("events.out.tfevents.*"))
    assert files, f"no TensorBoard event file under {folder}"
    for path in files:
        reader = EventAccumulator(str(path), size_guidance={"scalars": 0})
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            steps.setdefault(tag, set()).update(event.step for event in reader.Scalars(tag))
    return {tag: sorted(found) for tag, found in steps.items()}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_trl_script_logs_what_trl_logs(name, tmp_path, model, monkeypatch):
    (tmp_path / "trl").mkdir()
    (tmp_path / "rlvr").mkdir()
    theirs = run_script(SCRIPTS[name], "trl", tmp_path / "trl", model, monkeypatch)
    ours = run_script(SCRIPTS[name], "rlvr", tmp_path / "rlvr", model, monkeypatch)

    trl_history, rlvr_history = theirs["trainer"].state.log_history, ours["trainer"].state.log_history
    assert_same_log_history(trl_history, rlvr_history)
    last = [e for e in rlvr_history if not is_evaluation(e)][-1]
    assert "train_runtime" in last and "train_loss" in last  # transformers' end-of-training entry

    tags = {tag: steps for tag, steps in tensorboard_steps(tmp_path / "trl" / "out" / "runs").items()
            if not tag.startswith("eval/")}  # eval entries: see test_trl_evaluation.py
    mine = tensorboard_steps(tmp_path / "rlvr" / "out" / "runs")
    assert {tag: steps for tag, steps in mine.items() if not tag.startswith(("rlvr/", "eval/"))} == tags

    output, expected = ours["output"], theirs["output"]
    assert output.global_step == expected.global_step == theirs["trainer"].state.global_step
    assert sorted(output.metrics) == sorted(expected.metrics)
    assert output.training_loss == output.metrics["train_loss"] and math.isfinite(output.training_loss)
    if "seen" in theirs:
        assert ours["seen"] == theirs["seen"] and len(ours["seen"]) == output.global_step
    if name == "eval-callback":  # eval entries: see test_trl_evaluation.py
        recorded = [(r.steps, [log for log in r.logs if not any(k.startswith("eval_") for k in log[1])])
                    for r in (ours["recorder"], theirs["recorder"])]
        assert recorded[0] == recorded[1]
        assert recorded[0][0] == [1, 2] and [step for step, _ in recorded[0][1]] == [1, 2, 2]


def test_the_scripts_cover_what_they_claim(tmp_path, model, monkeypatch):
    """Not vacuous: TRL's default logging_steps (10) leaves a 3-step run one entry, the summary, holding the
    metrics of the steps since (TRL's log adds them) and the memory metrics; include_num_input_tokens_seen adds
    TRL's count; logging_first_step logs step 1; a reward's log_metric is logged under TRL's name."""
    ours = run_script(CUSTOM_REWARD, "rlvr", tmp_path, model, monkeypatch)
    (summary,) = ours["trainer"].state.log_history
    assert summary["step"] == 3 and "reward" in summary and "entropy" in summary
    assert {"train_mem_cpu_alloc_delta", "before_init_mem_cpu"} <= set(summary)
    (tmp_path / "iterations").mkdir()
    ours = run_script(ITERATIONS, "rlvr", tmp_path / "iterations", model, monkeypatch)
    entries = ours["trainer"].state.log_history
    assert [e["step"] for e in entries] == [2, 4, 4] and all("reward" in e for e in entries[:2])
    assert entries[1]["num_input_tokens_seen"] > entries[0]["num_input_tokens_seen"] > 0
    (tmp_path / "chat").mkdir()
    ours = run_script(CONVERSATIONAL, "rlvr", tmp_path / "chat", model, monkeypatch)
    first, second, summary = ours["trainer"].state.log_history
    assert (first["step"], second["step"], summary["step"]) == (1, 2, 3)  # logging_first_step, then every 2
    assert "digits/fraction" in first and not any(key.startswith("reward_fn/") for key in first)
