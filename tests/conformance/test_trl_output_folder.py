"""The output folder a TRL script leaves, file by file: TRL 1.16's own ``GRPOTrainer.train()`` beside rlvr's
(``from rlvr import GRPOConfig, GRPOTrainer``) on the same tiny model, prompts and fixed completions
(test_trl_training_step.py's harness), for ``save_strategy`` no, steps and epoch, with and without the script's
``save_model()`` at the end, full fine-tuning and LoRA.

What is compared: the names at output_dir's top and in each ``checkpoint-N`` (the same checkpoints; every file TRL
writes is in rlvr's folder; rlvr's own files, listed below, may stand beside them, and nothing else: so no model at
the top where TRL has none). Then what the files hold where transformers reads them: rng_state.pth has the keys of
transformers' ``_save_rng_state``, training_args.bin is the script's own GRPOConfig, README.md is a model card
with TRL's metadata keys, adapter_config.json equals TRL's for the same ``LoraConfig`` (use_rslora, use_dora,
modules_to_save). Last, checkpoints cross over: TRL's ``train(resume_from_checkpoint=<rlvr's checkpoint>)``
continues rlvr's run exactly (its next optimiser step equals rlvr's own, to the harness's bounds), and rlvr's
``train(resume_from_checkpoint=<TRL's checkpoint>)`` is refused with the reason (see the last test).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from .test_trl_training_step import (
    COMMON,
    LOSS_ABS,
    PARAM_REL,
    ROWS,
    TRL_ONLY,
    FixedCompletions,
    FixedEngine,
    assert_close,
    model_dir,  # noqa: F401  (the module's tiny float64 model fixture)
    reward,
    run_rlvr,
    run_trl,
    trainable,
)

pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

# rlvr's own files beside TRL's: the run's records and lock, the final-model record, a LoRA adapter's
# generation_config.json (at the top when save_model() wrote it); in a checkpoint its own state and manifest
RLVR_TOP = {".rlvr-run", ".rlvr.lock", ".rlvr-final-model.json", "config.yaml", "metrics.jsonl", "samples.jsonl",
            "evaluations.jsonl", "generation_config.json"}
RLVR_CHECKPOINT = {"rlvr_state.json", "manifest.json", "generation_config.json"}
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


def layout(folder: Path) -> dict[str, set[str]]:
    """{"": the names at the top of ``folder``, "checkpoint-N": each checkpoint's names} ({} when no folder)."""
    if not folder.is_dir():
        return {"": set()}
    tree = {"": {p.name for p in folder.iterdir()}}
    for checkpoint in folder.glob("checkpoint-*"):
        tree[checkpoint.name] = {p.name for p in checkpoint.iterdir()}
    return tree


def assert_same_layout(trl: dict[str, set[str]], rlvr: dict[str, set[str]]) -> None:
    assert sorted(rlvr) == sorted(trl), "the same checkpoints"
    for name, theirs in trl.items():
        ours, own = rlvr[name], RLVR_CHECKPOINT if name else RLVR_TOP
        assert theirs <= ours, f"{name or 'output_dir'}: rlvr lacks {sorted(theirs - ours)}"
        assert ours - theirs <= own, f"{name or 'output_dir'}: rlvr also writes {sorted(ours - theirs - own)}"


def saving_model(base):
    """TRL's trainer whose script calls ``save_model()`` after ``train()``."""

    class SavingModel(base):
        def train(self, *args, **kwargs):
            output = super().train(*args, **kwargs)
            self.save_model()
            return output

    return SavingModel


def run_rlvr_api(folder: Path, model_dir: Path, options: dict, monkeypatch, *, save_model: bool, peft=None):  # noqa: F811
    """rlvr's ``GRPOTrainer`` as the script uses it, its engine's generate replaced by the fixed completions."""
    from datasets import Dataset

    import rlvr.train.setup as setup_module
    from rlvr import GRPOConfig, GRPOTrainer

    fixed, build_engine = FixedCompletions(False), setup_module.build_engine
    monkeypatch.setattr(setup_module, "build_engine", lambda *a, **kw: FixedEngine(build_engine(*a, **kw), fixed))
    trl_only = {k: v for k, v in TRL_ONLY.items() if k != "model_init_kwargs"}  # (rlvr loads the model's own dtype)
    args = GRPOConfig(output_dir=str(folder), **{**COMMON, **trl_only, **options})
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=args, peft_config=peft,
                          train_dataset=Dataset.from_list(ROWS))
    trainer.train()
    if save_model:
        trainer.save_model()
    return trainer


# save options -> the checkpoints TRL writes (4 prompts, one a step: an epoch is 4 steps)
CASES = {
    "no": (dict(save_strategy="no", max_steps=2), set()),
    "steps": (dict(save_strategy="steps", save_steps=1, max_steps=2), {"checkpoint-1", "checkpoint-2"}),
    "epoch": (dict(save_strategy="epoch", max_steps=2), {"checkpoint-2"}),  # the end of training is an epoch end
}


@pytest.mark.parametrize("save_model", [False, True], ids=["no-save_model", "save_model"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_output_folder_is_trls(name, save_model, tmp_path, model_dir, monkeypatch):  # noqa: F811
    options, checkpoints = CASES[name]
    run_trl(tmp_path / "trl", model_dir, options, FixedCompletions(False), monkeypatch,
            trainer_class=saving_model if save_model else None)
    run_rlvr_api(tmp_path / "rlvr", model_dir, options, monkeypatch, save_model=save_model)
    trl, rlvr = layout(tmp_path / "trl"), layout(tmp_path / "rlvr")
    assert set(trl) - {""} == checkpoints  # (what TRL does, so that the comparison is not of empty folders)
    assert_same_layout(trl, rlvr)
    assert ("model.safetensors" in rlvr[""]) == save_model  # the final model only from save_model(), as in TRL


def test_lora_folder_and_adapter_config_are_trls(tmp_path, model_dir, monkeypatch):  # noqa: F811
    """A LoRA run with use_rslora, use_dora and modules_to_save: the same files, and adapter_config.json as TRL's
    but for base_model_name_or_path (rlvr writes the base's absolute folder, docs/training.md)."""
    from peft import LoraConfig

    extra = dict(use_rslora=True, use_dora=True, modules_to_save=["norm"])
    options = dict(save_strategy="steps", save_steps=2, max_steps=2)
    run_trl(tmp_path / "trl", model_dir, {**options, "lora": extra}, FixedCompletions(False), monkeypatch,
            trainer_class=saving_model)
    run_rlvr_api(tmp_path / "rlvr", model_dir, options, monkeypatch, save_model=True, peft=LoraConfig(**LORA, **extra))
    assert_same_layout(layout(tmp_path / "trl"), layout(tmp_path / "rlvr"))
    for folder in ("checkpoint-2", "."):
        theirs, ours = (json.loads((tmp_path / side / folder / "adapter_config.json").read_text())
                        for side in ("trl", "rlvr"))
        assert Path(ours.pop("base_model_name_or_path")) == Path(theirs.pop("base_model_name_or_path")).resolve()
        assert ours == theirs
        assert (ours["use_rslora"], ours["use_dora"], ours["modules_to_save"]) == (True, True, ["norm"])


def test_what_the_files_hold(tmp_path, model_dir, monkeypatch):  # noqa: F811
    """rng_state.pth: transformers' keys (it loads with transformers' allowlist); training_args.bin: the script's
    GRPOConfig; README.md: TRL's card metadata; trainer_state.json: a TrainerState."""
    from transformers import TrainerState
    from transformers.trainer_pt_utils import safe_globals

    options = CASES["steps"][0]
    run_trl(tmp_path / "trl", model_dir, options, FixedCompletions(False), monkeypatch)
    trainer = run_rlvr_api(tmp_path / "rlvr", model_dir, options, monkeypatch, save_model=False)
    theirs, ours = tmp_path / "trl" / "checkpoint-2", tmp_path / "rlvr" / "checkpoint-2"
    with safe_globals():
        rng = {side: torch.load(folder / "rng_state.pth", weights_only=True) for side, folder in
               (("trl", theirs), ("rlvr", ours))}
    assert set(rng["rlvr"]) == set(rng["trl"]) >= {"python", "numpy", "cpu"}
    args = torch.load(ours / "training_args.bin", weights_only=False)
    assert type(args) is type(trainer.args) and args.to_dict() == trainer.args.to_dict()
    assert TrainerState.load_from_json(str(ours / "trainer_state.json")).global_step == 2
    cards = {side: (tmp_path / side / "README.md").read_text() for side in ("trl", "rlvr")}
    for key in ("library_name: transformers", "model_name: ", "- generated_from_trainer"):
        assert key in cards["trl"] and key in cards["rlvr"], key
    assert "model_name: rlvr" in cards["rlvr"] and "model_name: trl" in cards["trl"]  # output_dir's name, as TRL


def resume_trl(folder: Path, model_dir: Path, options: dict, checkpoint: Path, monkeypatch) -> list[dict]:  # noqa: F811
    """TRL's GRPOTrainer resumed from ``checkpoint``: each optimiser step it takes (its loss, grad_norm, rate and
    trainable parameters after it)."""
    import trl.trainer.grpo_trainer as grpo
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    fixed, steps = FixedCompletions(False), []

    class Fixed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            return fixed(prompt_ids), None

    class Recorder(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            steps.append({"params": trainable(model)})

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" in logs:
                steps[-1] |= logs

    monkeypatch.setattr(grpo, "shuffle_sequence_dict", lambda batch: batch)
    args = GRPOConfig(output_dir=str(folder), **{**COMMON, **TRL_ONLY, **options})
    trainer = Fixed(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(ROWS),
                    callbacks=[Recorder()])
    trainer.train(resume_from_checkpoint=str(checkpoint))
    return steps


def test_trl_resumes_an_rlvr_checkpoint(tmp_path, model_dir, monkeypatch):  # noqa: F811
    """rlvr trains 2 optimiser steps (a checkpoint after each); TRL resumes rlvr's checkpoint-1 and takes step 2:
    the model, AdamW's moments, the schedule and the position in the data all come from rlvr's files, so TRL's
    step 2 is rlvr's step 2 (a dropped optimiser state or scheduler step would change the update)."""
    options = dict(save_strategy="steps", save_steps=1, max_steps=2, lr_scheduler_type="linear")
    rlvr = run_rlvr(tmp_path / "rlvr", model_dir, options, FixedCompletions(False), monkeypatch)
    assert rlvr.checkpoints == ["checkpoint-1", "checkpoint-2"]
    steps = resume_trl(tmp_path / "trl", model_dir, options, tmp_path / "rlvr" / "checkpoint-1", monkeypatch)
    assert len(steps) == 1, "TRL continues at global_step 1 and takes step 2 only"
    ours, theirs = rlvr.steps[1], steps[0]
    assert_close(ours.loss, theirs["loss"], "step 2: loss", absolute=LOSS_ABS)
    assert_close(ours.grad_norm, theirs["grad_norm"], "step 2: grad_norm")
    assert_close(ours.learning_rate, theirs["learning_rate"], "step 2: learning_rate")
    for name, value in theirs["params"].items():
        error = float((ours.params[name] - value).norm() / value.norm())
        assert error <= PARAM_REL, f"step 2: {name}: relative difference {error:.2e}"
    assert not math.isclose(rlvr.steps[0].learning_rate, rlvr.steps[1].learning_rate)  # the schedule moved


def test_a_trl_checkpoint_is_refused_for_resume_with_what_to_do(tmp_path, model_dir, monkeypatch):  # noqa: F811
    """The other way is not done: TRL's checkpoint has no rlvr_state.json (the data position as rlvr's sampler
    counts it, rlvr's counters) and its folder no config.yaml or metrics.jsonl, which rlvr's resume checks against.
    Both ways a script asks for it are refused naming the checkpoint and the fix; the fix (its weights as the
    model of a new run) works."""
    from datasets import Dataset

    from rlvr import GRPOConfig, GRPOTrainer

    run_trl(tmp_path / "trl", model_dir, CASES["steps"][0], FixedCompletions(False), monkeypatch)
    checkpoint = tmp_path / "trl" / "checkpoint-2"
    for output_dir, resume in ((tmp_path / "trl", True), (None, str(checkpoint))):
        args = GRPOConfig(output_dir=str(output_dir or tmp_path / "trl"), **{**COMMON, "use_cpu": True})
        trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=args,
                              train_dataset=Dataset.from_list(ROWS))
        with pytest.raises(ValueError, match=r"checkpoint-2 is a transformers/TRL checkpoint \(trainer_state.json, "
                                             r"no rlvr_state.json\).*model=.*checkpoint-2 and a new output_dir"):
            trainer.train(resume_from_checkpoint=resume)
    from safetensors.torch import load_file

    args = GRPOConfig(output_dir=str(tmp_path / "new"), **{**COMMON, "use_cpu": True})
    started = GRPOTrainer(model=str(checkpoint), reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(ROWS))
    for name, value in load_file(checkpoint / "model.safetensors").items():  # (loaded in float32, TRL's default)
        ours = started.model.state_dict()[name]
        torch.testing.assert_close(ours, value.to(ours.dtype), rtol=0, atol=0)
