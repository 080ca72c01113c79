"""TRL and verl rewards and data, unchanged, in short tiny-random runs: TRL's reward functions on a
TRL chat dataset, callables/rows/Datasets/callbacks from Python, async rewards, verl parquet + compute_score."""

import json

import pytest
import yaml

from rlvr.config import build_config
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

CHAT_ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}], "solution": str(a + b), "level": a}
             for a, b in [(2, 3), (4, 4), (1, 6), (5, 2)]]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trl_rewards_on_a_trl_chat_dataset(tmp_path):
    """trl.rewards.accuracy_reward and think_format_reward, by dotted name, on chat prompts with `solution`."""
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in CHAT_ROWS))
    out = tmp_path / "run"
    cfg = build_config(tiny_overrides(out, data=str(data), max_steps=2,
                                      reward_funcs=["trl.rewards.accuracy_reward", "trl.rewards.think_format_reward"]))
    history = Trainer(cfg).train()
    assert len(history) == 2
    for metrics in history:
        assert metrics["rewards/accuracy_reward/errors"] == metrics["rewards/think_format_reward/errors"] == 0.0
        assert metrics["rewards/accuracy_reward_mean"] is not None  # every gold parsed: no None values
    # accuracy_reward's log_extra columns reach samples.jsonl, one per completion
    samples = _lines(out / "samples.jsonl")
    assert samples and all(set(s["extra"]) == {"solution", "gold_parsed", "answer_parsed"} for s in samples)
    assert all(s["extra"]["solution"] == s["answer"] for s in samples)


class Recorder:
    """Records what a reward function receives; logs a metric and an extra column like TRL functions do."""

    __name__ = "recorder"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, completion_ids, trainer_state, log_extra, log_metric, **columns):
        self.calls.append({"keys": {"prompts", "completions", "completion_ids", "trainer_state", "log_extra",
                                    "log_metric", *columns}, "step": trainer_state.global_step,
                           "max_steps": trainer_state.max_steps, "completions": completions,
                           "completion_ids": completion_ids, "level": columns["level"]})
        log_metric("mean_len", sum(len(ids) for ids in completion_ids) / len(completion_ids))
        log_extra("n_ids", [len(ids) for ids in completion_ids])
        return [float(len(ids) % 2) for ids in completion_ids]


class StepsSeen:
    def __init__(self):
        self.steps, self.saves = [], []

    def on_step_end(self, step, metrics):
        self.steps.append((step, metrics["step"]))

    def on_save(self, step, path):
        self.saves.append((step, path.exists()))


def test_python_api_callables_rows_and_callbacks(tmp_path):
    from transformers import TrainerCallback

    class TRLStyle(TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_step_end(self, args, state, control, **kwargs):
            self.seen.append(("step_end", state.global_step, kwargs["model"] is not None))

        def on_log(self, args, state, control, logs=None, **kwargs):  # (transformers' logs: no step)
            self.seen.append(("log", state.global_step, "train_loss" in logs))

        def on_save(self, args, state, control, **kwargs):
            self.seen.append(("save", state.global_step, args.output_dir))

    recorder, plain, trl_style = Recorder(), StepsSeen(), TRLStyle()
    out = tmp_path / "run"
    cfg = build_config(tiny_overrides(out, data=CHAT_ROWS, reward_funcs=[recorder], max_steps=2, save_steps=1))
    history = Trainer(cfg, callbacks=[plain, trl_style]).train()
    # TRL's keyword arguments, every dataset column (and rlvr's gold `answer` and `id`)
    assert recorder.calls[0]["keys"] == {"prompts", "completions", "completion_ids", "trainer_state", "log_extra",
                                         "log_metric", "solution", "level", "answer", "id"}
    assert [(c["step"], c["max_steps"]) for c in recorder.calls] == [(0, 2), (1, 2)]  # steps finished so far
    first = recorder.calls[0]
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in first["completions"])  # chat prompts
    assert all(isinstance(ids, list) and all(isinstance(t, int) for t in ids) for ids in first["completion_ids"])
    assert len(first["level"]) == len(first["completions"]) == 16
    expected = [sum(len(i) for i in c["completion_ids"]) / 16 for c in recorder.calls]
    assert [m["reward_fn/mean_len"] for m in history] == pytest.approx(expected)
    assert not any("#sum" in key or "#n" in key for m in history for key in m)
    assert all(isinstance(s["extra"]["n_ids"], int) for s in _lines(out / "samples.jsonl"))
    assert plain.steps == [(1, 1), (2, 2)] and plain.saves == [(1, True), (2, True)]
    assert [e for e in trl_style.seen if e[0] != "save"] == [("step_end", 1, True), ("log", 1, False),
                                                             ("step_end", 2, True), ("log", 2, False),
                                                             ("log", 2, True)]  # transformers' last entry
    assert [e[:2] for e in trl_style.seen if e[0] == "save"] == [("save", 1), ("save", 2)]
    written = yaml.safe_load((out / "config.yaml").read_text())
    assert written["reward"]["reward_funcs"][0].startswith("python:") and written["data"]["data"].startswith(
        "python:list[4 rows, ")


def test_a_callback_without_hooks_is_refused(tmp_path):
    cfg = build_config(tiny_overrides(tmp_path / "run", max_steps=1))
    with pytest.raises(TypeError, match="neither on_step_end"):
        Trainer(cfg, callbacks=[object()])


def test_async_reward_and_a_datasets_dataset_train(tmp_path):
    import datasets

    async def short_async(prompts, completions, completion_ids, **kw):
        return [1.0 if len(ids) < 6 else 0.0 for ids in completion_ids]

    dataset = datasets.Dataset.from_list([{"prompt": f"What is {k} + 1?", "answer": str(k + 1)} for k in range(8)])
    cfg = build_config(tiny_overrides(tmp_path / "run", data=dataset, reward_funcs=[short_async], max_steps=2))
    history = Trainer(cfg).train()
    assert [m["rewards/short_async/errors"] for m in history] == [0.0, 0.0]
    assert all(m["rewards/short_async_mean"] is not None for m in history)


VERL_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info["index"] == 1:
        raise RuntimeError("no verifier for row 1")
    return {"score": float(ground_truth in solution_str), "acc": ground_truth in solution_str}
'''


def test_verl_parquet_and_compute_score_train(tmp_path):
    from tests.data.test_verl_rows import write_verl_gsm8k

    data = tmp_path / "train.parquet"
    write_verl_gsm8k(data)
    reward = tmp_path / "verl_reward.py"
    reward.write_text(VERL_REWARD)
    out = tmp_path / "run"
    # 3 rows, 3 prompts a step: row 1 (index 1) is in every call; it fails, the other two score
    cfg = build_config(tiny_overrides(out, data=str(data), reward_funcs=[f"verl:{reward}:compute_score"],
                                      prompts_per_step=3, max_steps=2, shuffle=False))
    trainer = Trainer(cfg)
    for row in trainer.rows:  # verl's chat prompt, its own "####" instruction only: never rewritten
        assert row["prompt"][-1]["content"].endswith('output the final answer after "####".')
        text = trainer.tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        assert trainer.prompt_builder.ids(row) == trainer.tokenizer(text, add_special_tokens=False)["input_ids"]
    history = trainer.train()
    assert len(history) == 2
    for metrics in history:
        assert metrics["rewards/compute_score/errors"] == 0.0  # the call worked
        assert metrics["rewards/compute_score/response_errors"] == 4.0  # row 1's 4 responses failed, counted
        assert metrics["rewards/all_none"] == 4.0  # ... and left out of the statistics, not scored 0
        assert 0.0 <= metrics["reward_fn/compute_score/acc"] <= 1.0
    samples = _lines(out / "samples.jsonl")
    assert {s["answer"] for s in samples} <= {"72", "10", "1500"}
