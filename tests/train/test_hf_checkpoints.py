"""The Hugging Face / TRL checkpoint layout: checkpoint-N/ and the final model load with the Auto
classes and hold the trainer's weights; trainer_state.json has log_history; resume_from_checkpoint
resumes exactly; LoRA's adapter names a real base and its merged model computes what base+adapter
computes."""

import json
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, TrainerState

from rlvr.config import build_config
from rlvr.models import load_policy
from rlvr.run.checkpoint_files import TRAINING_FILES, list_checkpoints
from rlvr.run.export import FINAL_RECORD
from rlvr.train.trainer import Trainer
from rlvr.train.trl_metric_names import trl_log_name
from tests.helpers.metrics import comparable

from .conftest import LOWERCASE_REWARD, tiny_overrides

PROMPT = "Compute 12+7. Put the answer in \\boxed{}."


class RecordingTrainer(Trainer):
    """Keeps a copy of the policy's weights at every save: what each checkpoint must hold."""

    def save(self, step, **kwargs):
        self.saved = getattr(self, "saved", {})
        self.saved[step] = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
        return super().save(step, **kwargs)


def _cfg(out, reward, **extra):
    return build_config(tiny_overrides(out, reward_funcs=[reward], **{"learning_rate": 1e-3, **extra}))


def _metrics(run, *, strip=True):
    """metrics.jsonl; ``strip``: without the keys that measure time and memory (they vary run to run)."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    if not strip:
        return lines
    return [comparable(m) for m in lines]


def _assert_weights_equal(loaded: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    state = loaded.state_dict()
    assert set(expected) <= set(state), set(expected) - set(state)
    for key, value in expected.items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0, msg=key)


def _logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids  # [1, T]
    with torch.no_grad():
        return model(input_ids=ids).logits  # [1, T, V]


@pytest.fixture(scope="module")
def reward(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("reward") / "lowercase_reward.py"
    path.write_text(LOWERCASE_REWARD)
    return f"{path}:lowercase_frac"


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, reward):
    out = tmp_path_factory.mktemp("hf") / "run"
    trainer = RecordingTrainer(_cfg(out, reward, max_steps=2, save_steps=1))
    trainer.train()
    return out, trainer


# ----------------------------------------------------------------------------- layout and loading
def test_each_checkpoint_loads_with_auto_classes_and_holds_the_trainers_weights(two_steps):
    out, trainer = two_steps
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1", "checkpoint-2"]
    assert not (out / "checkpoints").exists()
    assert any(not torch.equal(trainer.saved[1][k], trainer.saved[2][k]) for k in trainer.saved[1])  # they differ
    for step in (1, 2):
        folder = out / f"checkpoint-{step}"
        for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", *TRAINING_FILES):
            assert (folder / name).is_file(), f"{folder} lacks {name}"
        _assert_weights_equal(AutoModelForCausalLM.from_pretrained(folder), trainer.saved[step])
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert tokenizer(PROMPT).input_ids == trainer.tokenizer(PROMPT).input_ids
        assert (tokenizer.eos_token, tokenizer.pad_token) == (trainer.tokenizer.eos_token, trainer.tokenizer.pad_token)
        chat = [{"role": "user", "content": PROMPT}]
        assert (tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
                == trainer.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        eos = trainer.policy.generation_config.eos_token_id
        assert eos is not None and GenerationConfig.from_pretrained(folder).eos_token_id == eos


def test_the_final_model_is_at_output_dir(two_steps):
    out, trainer = two_steps
    model = AutoModelForCausalLM.from_pretrained(out)
    _assert_weights_equal(model, trainer.saved[2])
    assert AutoTokenizer.from_pretrained(out)(PROMPT).input_ids == trainer.tokenizer(PROMPT).input_ids
    assert (out / "generation_config.json").is_file()
    assert not any((out / name).exists() for name in TRAINING_FILES)  # the optimiser stays in checkpoint-2
    assert (out / "model.safetensors").read_bytes() == (out / "checkpoint-2" / "model.safetensors").read_bytes()
    assert set(json.loads((out / FINAL_RECORD).read_text())) >= {"model.safetensors", "config.json"}


def test_trainer_state_has_trls_log_of_the_metrics_jsonl_lines(two_steps):
    out, _ = two_steps
    lines = _metrics(out, strip=False)
    assert [m["step"] for m in lines] == [1, 2]
    for step in (1, 2):
        folder = out / f"checkpoint-{step}"
        state = TrainerState.load_from_json(str(folder / "trainer_state.json"))  # transformers reads it back
        assert state.global_step == step and state.logging_steps == 1  # optimiser steps: one per step here
        # TRL's log (rlvr.train.trl_log), an entry a step (rlvr's preset): the line's values under TRL's names, only
        for entry, line in zip(state.log_history, lines[:step], strict=True):
            trl = {trl_log_name(key): value for key, value in line.items() if trl_log_name(key) is not None}
            assert entry == {**trl, "step": line["step"]}
        assert {"loss", "reward", "learning_rate", "completions/mean_length"} <= set(state.log_history[0])
        own = json.loads((folder / "rlvr_state.json").read_text())
        assert own["step"] == step and "sampler" in own and "group_counter" in own  # rlvr's own state


# ----------------------------------------------------------------------------- resume_from_checkpoint
def test_resume_from_an_earlier_checkpoint_equals_the_uninterrupted_run(tmp_path, reward, caplog):
    full = RecordingTrainer(_cfg(tmp_path / "full", reward, max_steps=2))
    full.train()
    split = tmp_path / "split"
    Trainer(_cfg(split, reward, max_steps=3, save_steps=1, save_total_limit=None)).train()  # went on to step 3
    options = tiny_overrides(split, reward_funcs=[reward], learning_rate=1e-3, max_steps=2, save_steps=1,
                             save_total_limit=None, resume_from_checkpoint=str(split / "checkpoint-1"))
    del options["output_dir"]  # unset: the checkpoint's own run folder
    with caplog.at_level("WARNING", logger="rlvr.run.checkpoints"):
        history = Trainer(build_config(options)).train()
    assert [m["step"] for m in history] == [2]
    assert [p.name for p in list_checkpoints(split)] == ["checkpoint-1", "checkpoint-2"]  # step 3 was abandoned
    assert any("removed the later checkpoints checkpoint-2, checkpoint-3" in r.getMessage() for r in caplog.records)
    _assert_weights_equal(AutoModelForCausalLM.from_pretrained(split), full.saved[2])  # the final model: step 2's
    _assert_weights_equal(AutoModelForCausalLM.from_pretrained(split / "checkpoint-2"), full.saved[2])
    assert _metrics(split) == _metrics(tmp_path / "full")


def test_resume_from_checkpoint_refuses_what_is_no_checkpoint_of_this_run(tmp_path, two_steps, reward):
    out, _ = two_steps
    cases = {
        str(tmp_path / "nowhere" / "checkpoint-3"): r" does not exist; pass a checkpoint folder of a run",
        str(out): r"is not an rlvr checkpoint; it is a run folder: pass one of its checkpoints "
                  r"\(checkpoint-1, checkpoint-2\)",
        str(tmp_path): r"is not an rlvr checkpoint; pass a checkpoint-N folder written by `rlvr train`",
    }
    for path, message in cases.items():
        with pytest.raises(ValueError, match=f"resume_from_checkpoint={re.escape(path)}.*{message}"):
            Trainer(_cfg(tmp_path / "other", reward, resume_from_checkpoint=path))
    with pytest.raises(ValueError, match=f"is a checkpoint of the run {re.escape(str(out))}, not of output_dir=.*"
                                         f"other.*Pass output_dir={re.escape(str(out))}"):
        Trainer(_cfg(tmp_path / "other", reward, resume_from_checkpoint=str(out / "checkpoint-1")))
    assert not (tmp_path / "other").exists()  # refused before anything was written
    with pytest.raises(ValueError, match="resume_from_checkpoint=.*without overwrite_output_dir=true"):
        _cfg(out, reward, resume_from_checkpoint=str(out / "checkpoint-1"), overwrite_output_dir=True)


def test_a_damaged_resume_from_checkpoint_is_refused(tmp_path, reward):
    out = tmp_path / "r"
    Trainer(_cfg(out, reward, max_steps=1)).train()
    (out / "checkpoint-1" / "optimizer.pt").unlink()
    with pytest.raises(ValueError, match=r"checkpoint-1 is damaged \(optimizer.pt missing\); pass an earlier"):
        Trainer(_cfg(out, reward, max_steps=2, resume_from_checkpoint=str(out / "checkpoint-1"))).train()


# ----------------------------------------------------------------------------- LoRA
def test_lora_adapter_names_a_real_base_and_the_merged_model_equals_base_plus_adapter(tmp_path, reward):
    out = tmp_path / "lora"
    trainer = Trainer(_cfg(out, reward, max_steps=2, save_steps=1, lora_r=4, lora_alpha=8, learning_rate=2e-2,
                           save_merged_model=True))
    trainer.train()
    tokenizer = trainer.tokenizer
    expected = _logits(trainer.policy, tokenizer)
    base_dir = (out / "base_model").resolve()
    base, _ = load_policy("tiny-random", seed=0)  # what the run started from (seed=0)
    _assert_weights_equal(AutoModelForCausalLM.from_pretrained(base_dir), base.state_dict())
    base_logits = _logits(base, tokenizer)
    assert (expected - base_logits).abs().max() > 1e-3  # the adapters did change the model
    for folder in (out / "checkpoint-2", out):  # the last checkpoint and the final model
        adapter_config = json.loads((folder / "adapter_config.json").read_text())
        assert adapter_config["base_model_name_or_path"] == str(base_dir)
        adapter = AutoModelForCausalLM.from_pretrained(folder)  # transformers loads the base, then the adapter
        torch.testing.assert_close(_logits(adapter, tokenizer), expected)
        merged = AutoModelForCausalLM.from_pretrained(folder / "merged")
        assert not any("lora" in key for key in merged.state_dict())
        torch.testing.assert_close(_logits(merged, tokenizer), expected)
        assert AutoTokenizer.from_pretrained(folder / "merged")(PROMPT).input_ids == tokenizer(PROMPT).input_ids
    assert not (out / "checkpoint-1" / "config.json").exists()  # an adapter folder: no config.json to mislead


def test_save_merged_model_without_lora_is_refused(tmp_path, reward):
    with pytest.raises(ValueError, match="save_merged_model=True: only a LoRA run"):
        _cfg(tmp_path / "r", reward, save_merged_model=True)


