"""TRL's evaluation, beside TRL: TRL 1.16's own ``GRPOTrainer`` (its ``train()`` and ``evaluate()``) and
``rlvr.GRPOTrainer`` on the same tiny float64 model, prompts and fixed completions (test_trl_training_step.py's
harness: generation replaced on both sides), compared on what a TRL user sees of an evaluation:

- ``state.log_history``'s evaluation entries: the same keys (``eval_loss``, ``eval_runtime``, ..., ``eval_entropy``,
  ``eval_clip_ratio/*``, ``eval_num_tokens``, ``epoch``, ``step``), on the same steps, with the same values (the
  harness's tolerances; the timings by key only), and ``evaluate()``'s return;
- the global steps a ``TrainerCallback`` sees in ``on_log`` and ``on_evaluate``, in TRL's order (an evaluation's
  ``on_log`` after the step's own);
- TensorBoard's ``eval/`` tags and their steps (event files read back with EventAccumulator);
- the prompts of every generation call, evaluations' batches included (TRL's eval sampler order and batch size).

TensorBoard: transformers 5.25's TensorBoardCallback has no logging_dir before ``on_train_begin``, so TRL's writer
opened by an ``evaluate()`` before ``train()`` writes under the working directory's ``runs/`` (and keeps writing
there during training); rlvr writes under ``logging_dir``. TRL runs here in a working directory of its own, whose
events count as TRL's.

Cases: ``eval_strategy=steps`` with ``eval_steps`` a fraction (and the evaluation transformers adds at the end of
training), β > 0 (``eval_kl``, a loss that depends on the weights); ``eval_strategy=epoch`` with ``eval_delay``,
``eval_on_start``, ``num_generations_eval`` and ``per_device_eval_batch_size``, an entropy bonus
(``eval_policy_loss``), an ``evaluate()`` before training; each with an ``evaluate()`` after training.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.train.evaluation_trl import eval_order

from .conftest import MAX_COMPLETION_LENGTH
from .test_trl_training_step import (  # noqa: F401  (model_dir: a fixture)
    COMMON,
    LOSS_ABS,
    ROWS,
    FixedCompletions,
    FixedEngine,
    assert_close,
    fixed_group,
    is_evaluation,
    model_dir,
    reward,
    run_trl,
)

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")
pytest.importorskip("tensorboard", reason="tensorboard is in the tensorboard extra (make setup installs it)")

EVAL_ROWS = [{"prompt": p, "answer": "5"} for p in ("Eval: 1 + 1?", "Two words.", "q", "Say yes or no.", "Last!")]
TIMINGS = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second", "eval_model_preparation_time")
ACC = dict(gradient_accumulation_steps=2, steps_per_generation=2)  # a generation of 2 prompts: 1 optimiser step
CASES = {
    # fraction 0.5 of 3 steps: every 2 (ceil), and the last step (transformers evaluates at the end of training)
    "steps": dict(eval_strategy="steps", eval_steps=0.5, beta=0.04, use_bias_correction_kl=False, max_steps=3),
    # an epoch is 2 steps (4 prompts, 2 a step); delay 1.1 epochs: not at epoch 1 (step 2), at the end (1.5)
    "epoch": dict(eval_strategy="epoch", eval_delay=1.1, eval_on_start=True, num_generations_eval=2,
                  per_device_eval_batch_size=4, entropy_coef=0.05, loss_type="grpo", **ACC, max_steps=3),
}
# the log_history entries' steps (an evaluate() before train() is not among them: train() starts a new state)
EVALUATIONS = {"steps": [2, 3, 3], "epoch": [0, 3, 3]}
BEFORE = {"steps": False, "epoch": True}  # an evaluate() before training too


class GroupedCompletions(FixedCompletions):
    """The fixed completions for groups of any size (an evaluation's num_generations_eval): a group is a run of
    equal prompts, and its k-th completion is fixed_group's (the same on both sides)."""

    def __call__(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        self.prompts_seen.append([list(p) for p in prompt_ids])
        out, group, start = [], 0, 0
        while start < len(prompt_ids):
            end = start
            while end < len(prompt_ids) and prompt_ids[end] == prompt_ids[start]:
                end += 1
            completions = fixed_group(group, all_truncated=self.all_truncated)
            out += [completions[k % len(completions)] for k in range(end - start)]
            group, start = group + 1, end
        return out


class Events:
    """What a TrainerCallback sees: (hook, global_step, kind of log) in order; kind: train (a step's line), eval."""

    def __init__(self):
        from transformers import TrainerCallback

        self.seen: list[tuple[str, int, str]] = []
        outer = self

        class Recorder(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if is_evaluation(logs) or "loss" in logs:
                    outer.seen.append(("on_log", state.global_step, "eval" if is_evaluation(logs) else "train"))

            def on_evaluate(self, args, state, control, metrics=None, **kwargs):
                assert is_evaluation(metrics)
                outer.seen.append(("on_evaluate", state.global_step, "eval"))

        self.callback = Recorder()


def tensorboard_steps(folder: Path) -> dict[str, list[int]]:
    """The steps of every ``eval/`` scalar in the event files under ``folder`` (all of them: an evaluation after
    training reopens the writer): tag -> sorted steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[str, list[int]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        reader = EventAccumulator(str(events), size_guidance={"scalars": 0})
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            if tag.startswith("eval/"):
                steps.setdefault(tag, []).extend(e.step for e in reader.Scalars(tag))
    return {tag: sorted(values) for tag, values in steps.items()}


def run_trl_evaluating(folder: Path, model: Path, options: dict, monkeypatch, *, before: bool):
    """TRL's GRPOTrainer with ``eval_dataset``: ``evaluate()`` (before and) after ``train()``; (Run, evaluate()'s
    returns, the callback's events)."""
    from datasets import Dataset

    events, returned = Events(), []

    def evaluating(base):
        class Evaluating(base):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, eval_dataset=Dataset.from_list(EVAL_ROWS), **kwargs)
                self.add_callback(events.callback)

            def train(self, *args, **kwargs):
                if before:
                    returned.append(self.evaluate())
                output = super().train(*args, **kwargs)
                returned.append(self.evaluate())
                return output

        return Evaluating

    fixed = GroupedCompletions(False)
    (folder.parent / "trl-cwd").mkdir()  # TensorBoard before train(): ./runs (the module doc)
    monkeypatch.chdir(folder.parent / "trl-cwd")
    run = run_trl(folder, model, {**options, "report_to": ["tensorboard"]}, fixed, monkeypatch,
                  trainer_class=evaluating)
    return run, fixed, returned, events


def run_rlvr_evaluating(folder: Path, model: Path, options: dict, monkeypatch, *, before: bool):
    """rlvr's GRPOTrainer on the same arguments (the model loaded in float64, as the harness's), its engine's
    generate replaced by the fixed completions; (its log_history's evaluations, evaluate()'s returns, events)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import rlvr.train.setup as setup_module
    from rlvr import GRPOConfig, GRPOTrainer

    fixed, events = GroupedCompletions(False), Events()
    build_engine = setup_module.build_engine
    monkeypatch.setattr(setup_module, "build_engine", lambda *a, **kw: FixedEngine(build_engine(*a, **kw), fixed))
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float64)
    args = GRPOConfig(output_dir=str(folder), **COMMON, report_to=["tensorboard"], **options)
    trainer = GRPOTrainer(model=policy, processing_class=AutoTokenizer.from_pretrained(model),
                          reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(ROWS),
                          eval_dataset=Dataset.from_list(EVAL_ROWS), callbacks=[events.callback])
    returned = [trainer.evaluate()] if before else []
    trainer.train()
    returned.append(trainer.evaluate())
    evaluations = [line for line in trainer.state.log_history if is_evaluation(line)]
    return evaluations, fixed, returned, events


def calls(fixed: FixedCompletions) -> list[list[tuple[int, ...]]]:
    """Each generation call's prompts, a group once (for a readable difference)."""
    return [list(dict.fromkeys(tuple(p) for p in call)) for call in fixed.prompts_seen]


def assert_same_entry(ours: dict, theirs: dict, what: str) -> None:
    """The same keys; the same values (the harness's bounds: LOSS_ABS for a loss), the timings by key only."""
    assert set(ours) == set(theirs), f"{what}: rlvr's keys differ: {set(ours) ^ set(theirs)}"
    wrong = []
    for key, value in theirs.items():
        if key in TIMINGS:
            assert ours[key] >= 0, f"{what}: {key}"
            continue
        absolute = LOSS_ABS if key in ("eval_loss", "eval_policy_loss") else 1e-9
        try:
            assert_close(ours[key], value, key, absolute=absolute)
        except AssertionError:
            wrong.append(f"{key}: rlvr {ours[key]}, TRL {value}")
    assert not wrong, f"{what}: " + "; ".join(wrong)


@pytest.mark.parametrize("name", list(CASES))
def test_evaluation_is_trls(name, tmp_path, model_dir, monkeypatch):  # noqa: F811
    options = CASES[name]
    ours, our_fixed, our_returns, our_events = run_rlvr_evaluating(tmp_path / "rlvr", model_dir, options,
                                                                   monkeypatch, before=BEFORE[name])
    trl, their_fixed, their_returns, their_events = run_trl_evaluating(tmp_path / "trl", model_dir, options,
                                                                       monkeypatch, before=BEFORE[name])
    # the same generation calls: training's and each evaluation's batches, their prompts in TRL's eval order (a
    # shuffle: not the dataset's order)
    assert eval_order(len(EVAL_ROWS), COMMON["seed"]) != list(range(len(EVAL_ROWS)))
    assert calls(our_fixed) == calls(their_fixed)
    assert our_fixed.prompts_seen == their_fixed.prompts_seen
    theirs = trl.evaluations
    assert [e["step"] for e in theirs] == EVALUATIONS[name], "TRL's evaluations"
    assert [e["step"] for e in ours] == EVALUATIONS[name], "rlvr's evaluations"
    assert "eval_loss" in theirs[0] and "eval_entropy" in theirs[0] and "eval_clip_ratio/high_max" in theirs[0]
    assert ("eval_kl" in theirs[0]) == (name == "steps") and ("eval_policy_loss" in theirs[0]) == (name == "epoch")
    for i, (mine, their) in enumerate(zip(ours, theirs, strict=True)):
        assert_same_entry(mine, their, f"evaluation {i} (step {their['step']})")
    assert len(our_returns) == len(their_returns)
    for mine, their in zip(our_returns, their_returns, strict=True):
        assert_same_entry(mine, their, "evaluate()'s return")
        assert "step" not in mine and "epoch" in mine
    # not vacuous: the evaluation's loss and entropy follow the weights (they moved between the evaluations)
    assert theirs[0]["eval_entropy"] != theirs[-1]["eval_entropy"]
    assert our_events.seen == their_events.seen
    assert ("on_evaluate", EVALUATIONS[name][-1], "eval") in their_events.seen
    our_tags, their_tags = tensorboard_steps(tmp_path / "rlvr"), tensorboard_steps(tmp_path / "trl")
    for tag, steps in tensorboard_steps(tmp_path / "trl-cwd").items():  # (the module doc: TensorBoard)
        their_tags[tag] = sorted(their_tags.get(tag, []) + steps)
    assert our_tags == their_tags and "eval/loss" in their_tags
    assert their_tags["eval/loss"] == [0] * BEFORE[name] + EVALUATIONS[name]  # (an evaluate() before train() too)


def test_evaluation_settings_are_refused_as_trl_refuses_them(tmp_path):
    """TRL's Trainer refuses evaluation without an eval_dataset, and an eval batch that splits a group."""
    from rlvr import GRPOConfig, GRPOTrainer

    args = dict(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=4,
                max_completion_length=MAX_COMPLETION_LENGTH, max_steps=1)
    with pytest.raises(ValueError, match="evaluation needs an eval_dataset"):
        GRPOTrainer(model="tiny", reward_funcs=[reward], args=GRPOConfig(**args, eval_strategy="steps"),
                    train_dataset=ROWS)
    with pytest.raises(ValueError, match="eval_on_start=True: evaluation needs an eval_dataset"):
        GRPOTrainer(model="tiny", reward_funcs=[reward], args=GRPOConfig(**args, eval_on_start=True),
                    train_dataset=ROWS)
    with pytest.raises(ValueError, match="per_device_eval_batch_size=6 must be a positive multiple of "
                                         "num_generations_eval=4"):
        GRPOTrainer(model="tiny", reward_funcs=[reward], args=GRPOConfig(**args, per_device_eval_batch_size=6),
                    train_dataset=ROWS, eval_dataset=EVAL_ROWS)
    with pytest.raises(ValueError, match="eval_steps=2.5: use a whole number"):
        GRPOTrainer(model="tiny", reward_funcs=[reward], args=GRPOConfig(**args, eval_strategy="steps", eval_steps=2.5),
                    train_dataset=ROWS, eval_dataset=EVAL_ROWS)


def test_a_recipe_run_by_rlvr_train_evaluates_as_trl(tmp_path, model_dir, monkeypatch):  # noqa: F811
    """The same evaluation from a config (rlvr train's path: TRL's keys, the eval data a file): a TRL-shaped config
    evaluates as TRL does (eval_mode=trl, chosen by its TRL keys), entries of their own with TRL's keys, steps and
    values, beside TRL's own run of the same options."""
    import json

    from .test_trl_training_step import run_rlvr

    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps(row) + "\n" for row in EVAL_ROWS))
    options = CASES["steps"]
    run = run_rlvr(tmp_path / "rlvr", model_dir, {**options, "eval_data": [str(eval_file)]}, GroupedCompletions(False),
                   monkeypatch)
    ours = [line for line in run.log_history if is_evaluation(line)]
    trl, *_ = run_trl_evaluating(tmp_path / "trl", model_dir, options, monkeypatch, before=False)
    theirs = trl.evaluations[:len(ours)]  # (TRL's last: the script's evaluate() after train())
    assert [e["step"] for e in ours] == EVALUATIONS["steps"][:2] == [e["step"] for e in theirs]
    for i, (mine, their) in enumerate(zip(ours, theirs, strict=True)):
        assert_same_entry(mine, their, f"evaluation {i} (step {their['step']})")
    assert not any(key.startswith("eval/") for line in run.log_history for key in line)  # no pass@k metrics
