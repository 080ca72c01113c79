"""GRPOTrainer's arguments as TRL's: what each becomes in rlvr's config, and what is refused with its reason."""

from __future__ import annotations

import pytest
from datasets import Dataset

from rlvr import GRPOConfig, GRPOTrainer
from rlvr.models import tiny_random_model_and_tokenizer

ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]


def reward(completions, **kwargs):
    return [0.0 for _ in completions]


def _trainer(**kwargs):
    arguments = {"model": "tiny-random", "reward_funcs": reward, "train_dataset": Dataset.from_list(ROWS),
                 "args": GRPOConfig(output_dir="unused", max_steps=1)} | kwargs
    return GRPOTrainer(**arguments)


def test_args_become_a_trl_preset_config():
    cfg = _trainer(args=GRPOConfig(output_dir="o", learning_rate=5e-6, num_generations=4, max_steps=3)).cfg
    assert cfg.run.preset == "trl" and cfg.optim.learning_rate == 5e-6 and cfg.rollout.num_generations == 4
    assert cfg.run.output_dir == "o"


def test_a_peft_lora_config_becomes_rlvrs_lora_options():
    peft = pytest.importorskip("peft")
    cfg = _trainer(peft_config=peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05,
                                               target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")).cfg
    assert (cfg.model.lora_r, cfg.model.lora_alpha, cfg.model.lora_dropout) == (8, 16, 0.05)
    assert cfg.model.lora_target_modules == "q_proj,v_proj"
    cfg = _trainer(peft_config=peft.LoraConfig(r=8, use_rslora=True, use_dora=True, modules_to_save=["lm_head"])).cfg
    assert (cfg.model.use_rslora, cfg.model.use_dora, cfg.model.lora_modules_to_save) == (True, True, "lm_head")
    with pytest.raises(ValueError, match="peft_config.lora_bias=True: rlvr's LoRA takes r, lora_alpha"):
        _trainer(peft_config=peft.LoraConfig(r=8, lora_bias=True))


def test_a_loaded_model_and_its_tokenizer_are_used_as_given(tmp_path):
    model, tokenizer = tiny_random_model_and_tokenizer(seed=5)
    trainer = _trainer(model=model, processing_class=tokenizer,
                       args=GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, report_to="none"))
    assert trainer.cfg.model.model.startswith("python:")
    assert trainer.model is model and trainer.processing_class is tokenizer


def test_a_float16_model_on_the_cpu_trains_in_float32_with_a_line(tmp_path, caplog):
    """TRL users load with dtype=torch.float16; on a CPU rlvr converts (it was an autocast traceback), says so,
    and trains: the weights move (float16 master weights would round a small step away)."""
    import torch

    model, tokenizer = tiny_random_model_and_tokenizer(seed=5)
    model.half()
    before = model.lm_head.weight.detach().float().clone()
    trainer = _trainer(model=model, processing_class=tokenizer,
                       args=GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, report_to="none",
                                       num_generations=4, per_device_train_batch_size=4, max_completion_length=8,
                                       learning_rate=1e-4, save_strategy="no"),
                       reward_funcs=lambda completions, **kw: [float(len(c) % 2) for c in completions])
    with caplog.at_level("WARNING", logger="rlvr.models.loading"):
        trainer.train()
    assert "the model's weights are float16 and this run is on the CPU: converted to float32" in caplog.text
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert not torch.equal(trainer.model.lm_head.weight.detach(), before)


@pytest.mark.parametrize("argument", ["reward_processing_classes", "quantization_config", "rollout_func"])
def test_what_rlvr_has_no_counterpart_for_is_refused_with_the_reason(argument):
    with pytest.raises(ValueError, match=f"GRPOTrainer\\({argument}=...\\): not supported by rlvr: "):
        _trainer(**{argument: object()})


def multiply(a: int, b: int) -> int:
    """Multiply.

    Args:
        a: first
        b: second
    """
    return a * b


def test_tools_are_trls_function_tools():
    """GRPOTrainer(tools=[fn]) is the run's function tools (tests/conformance/test_trl_tools.py trains with them
    beside TRL); tools=[] is none, as in TRL."""
    from rlvr.train.plan import tool_settings

    trainer = _trainer(tools=[multiply])
    assert tool_settings(trainer.cfg).functions == (multiply,)
    assert _trainer(tools=[]).cfg.rollout.tools is None


def test_a_missing_reward_or_dataset_or_a_dataset_dict_is_named():
    with pytest.raises(ValueError, match="needs reward_funcs"):
        _trainer(reward_funcs=None)
    with pytest.raises(ValueError, match="needs train_dataset"):
        _trainer(train_dataset=None)
    from datasets import DatasetDict

    with pytest.raises(TypeError, match="pick a split"):
        _trainer(train_dataset=DatasetDict({"train": Dataset.from_list(ROWS)}))


def test_rows_without_a_gold_train_when_every_reward_is_the_users(tmp_path):
    """TRL takes prompts alone for the user's reward functions; rlvr keeps its refusal where a built-in reward or
    the algorithm reads the gold."""
    from rlvr.config import build_config
    from rlvr.train.dry_run import dry_run_report

    rows = [{"prompt": f"Say {i}."} for i in range(4)]
    ok = build_config({"model": "tiny-random", "data": rows, "reward_funcs": [reward], "max_steps": 1})
    assert dry_run_report(ok)
    for refused in ({"reward_funcs": ["accuracy"]}, {"reward_funcs": [reward], "algo": "dagrpo"}):
        cfg = build_config({"model": "tiny-random", "data": rows, "reward_funcs": [reward], "max_steps": 1} | refused)
        with pytest.raises(ValueError, match="field 'answer' is missing"):
            dry_run_report(cfg)


def test_a_stream_train_set_needs_max_steps_and_only_what_the_run_consumes_is_read(tmp_path):
    """TRL 1.16 takes an IterableDataset (a streaming dataset) when max_steps is set. It was read whole: an endless
    stream never returned. Now the run's rows are read: max_steps generation batches of B prompts."""
    from datasets import IterableDataset

    read = []

    def endless():
        for i in range(10_000):
            read.append(i)
            yield {"prompt": f"What is {i} + 1?", "answer": str(i + 1)}
        raise AssertionError("the stream was read far past what the run needs")

    stream = IterableDataset.from_generator(endless)
    with pytest.raises(ValueError, match="IterableDataset.*set max_steps in args, as TRL requires"):
        _trainer(train_dataset=stream, args=GRPOConfig(output_dir=str(tmp_path / "x")))
    args = GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=4, report_to="none", save_strategy="no")
    trainer = _trainer(train_dataset=stream, args=args)
    rows = trainer.train_dataset
    assert [row["prompt"] for row in rows] == [f"What is {i} + 1?" for i in range(3 * 2)]  # 3 steps x 2 prompts
    assert len(read) < 100  # what the run consumes, and the reader's own look-ahead at most
    trainer.train()
    assert trainer.state.global_step == 3
