"""Prompts the model cannot take are refused at start-up, naming the row (rlvr.data.input_limits)."""

import json

import pytest
from transformers import AutoTokenizer, LlamaConfig

from rlvr.cli import main
from rlvr.data import DEFAULT_INSTRUCTION, load_rows, prompt_messages, render_prompt
from rlvr.data.input_limits import TOKEN_SLACK, _byte_bound, check_lengths, prompt_budget, template_bytes
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.models.loading import position_limit
from rlvr.models.smollm2 import smollm2_path
from rlvr.rollout.base import LocalEngine

from .conftest import tiny_overrides

MODEL, TOKENIZER = tiny_random_model_and_tokenizer(0)  # 1,024 positions, one token per byte


def _tokenize(row, tokenizer=TOKENIZER, system_prompt=None, instruction=DEFAULT_INSTRUCTION):
    messages = prompt_messages(row["prompt"], system_prompt=system_prompt, instruction=instruction)
    return tokenizer(render_prompt(tokenizer, messages), add_special_tokens=False)["input_ids"]


def _rows(*prompts):
    return [{"id": f"r{i}", "prompt": p, "answer": "1"} for i, p in enumerate(prompts)]


def test_position_limit_reads_the_config_rope_scaling_tokenizer_and_engine():
    assert position_limit(MODEL, TOKENIZER) == 1024

    class Model:
        config = LlamaConfig(max_position_embeddings=1024,
                             rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024})

    assert position_limit(Model()) == 4096  # Qwen's YaRN recipe: 4 x the original positions
    no_config = type("M", (), {"config": None})()
    assert position_limit(no_config, type("T", (), {"model_max_length": 2048})()) == 2048
    assert position_limit(no_config, type("T", (), {"model_max_length": int(1e30)})()) is None  # "unset"
    assert position_limit(MODEL, engine=type("E", (), {"max_model_len": 512})()) == 512  # vLLM's own limit


def test_a_prompt_longer_than_the_positions_names_the_row_and_the_fix():
    # 3,000 bytes = 3,000+ tokens on a 1,024-position model: it used to train silently (rotary positions)
    rows = _rows("What is 1 + 1?", "x" * 3000, "What is 2 + 2?")
    with pytest.raises(ValueError) as info:
        check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=40,
                      template_bytes=template_bytes(TOKENIZER, system_prompt=None, instruction=DEFAULT_INSTRUCTION),
                      source="toy.jsonl")
    message = str(info.value)
    assert "1 of 3 prompts of toy.jsonl do not fit the model's 1024 positions with max_completion_length=40" in message
    assert "row 1 (id 'r1') has 3091 tokens" in message and "filter those rows" in message
    assert "\n" not in message


def test_lowering_max_completion_length_is_offered_when_it_would_help():
    rows = _rows("x" * 900)
    with pytest.raises(ValueError, match="lower max_completion_length to at most 33"):
        check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=200)


def test_max_completion_length_beyond_the_positions_is_refused_before_any_tokenising():
    def tokenize(row):
        raise AssertionError("no row should be tokenised")

    with pytest.raises(ValueError, match="max_completion_length=100000000 does not fit the model's 1024 positions"):
        check_lengths(_rows("a"), tokenize, max_positions=1024, max_completion_length=100_000_000)
    with pytest.raises(ValueError, match="max_completion_length=1024"):
        prompt_budget(max_positions=1024, max_completion_length=1024, max_prompt_length=None)


def test_max_prompt_length_refuses_longer_prompts():
    rows = _rows("What is 1 + 1?", "y" * 400)
    with pytest.raises(ValueError, match=r"longer than max_prompt_length=256 tokens: row 1 \(id 'r1'\) has 491"):
        check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=40, max_prompt_length=256)
    assert check_lengths(rows, _tokenize, max_positions=None, max_completion_length=40).budget is None


def test_rows_within_the_byte_bound_are_not_tokenised_and_the_bound_holds():
    rows = load_rows("gsm8k-100")
    calls = []

    def counting(row):
        calls.append(row["id"])
        return _tokenize(row)

    per_row = template_bytes(TOKENIZER, system_prompt=None, instruction=DEFAULT_INSTRUCTION)
    result = check_lengths(rows, counting, max_positions=1024, max_completion_length=40, template_bytes=per_row)
    assert calls == [] and result.tokenized == 0 and result.budget == 984
    # without the bound every row is tokenised; the bound is never below the true count (SmolLM2's BPE too)
    assert check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=40).tokenized == 100
    smollm2 = AutoTokenizer.from_pretrained(str(smollm2_path()))
    for tokenizer, system_prompt in ((TOKENIZER, None), (smollm2, None), (smollm2, "Answer: briefly.")):
        per_row = template_bytes(tokenizer, system_prompt=system_prompt, instruction=DEFAULT_INSTRUCTION)
        for row in rows:
            tokens = len(_tokenize(row, tokenizer, system_prompt))
            assert tokens <= _byte_bound(row, per_row) + TOKEN_SLACK


def test_rephrasings_and_message_prompts_are_bounded_too():
    long = "z" * 2000
    with_rephrasing = {"id": "q", "prompt": "short", "rephrasings": [long]}
    assert _byte_bound(with_rephrasing, 100) == 100 + 2000
    chat = {"id": "c", "prompt": [{"role": "system", "content": "s" * 10}, {"role": "user", "content": long}]}
    assert _byte_bound(chat, 100) == 2 * 100 + 2010
    calls = []
    check_lengths([with_rephrasing], lambda row: calls.append(row) or [[1] * 5, [1] * 10],
                  max_positions=1024, max_completion_length=40, template_bytes=100)
    assert calls == [with_rephrasing]  # over the bound: tokenised, every variant counted


def _train(tmp_path, **extra):
    options = tiny_overrides(tmp_path / "run", max_steps=1, prompts_per_step=2, num_generations=2, **extra)
    return main(["train", *[f"{key}={value}" for key, value in options.items()]])


@pytest.fixture
def no_generation(monkeypatch):
    """Nothing may be generated: the check must stop the run first (and never allocate 25 GB)."""
    def generate(self, *args, **kwargs):
        raise AssertionError("generation started: the start-up length check did not run")

    monkeypatch.setattr(LocalEngine, "generate", generate)


def test_training_refuses_a_too_long_prompt_at_start_up(tmp_path, capsys, no_generation):
    data = tmp_path / "toy.jsonl"
    rows = [{"id": "ok", "prompt": "What is 1 + 1?", "answer": "2"}, {"id": "huge", "prompt": "7 " * 1500, "answer": "7"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert _train(tmp_path, data=str(data)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "row 1 (id 'huge') has 3091 tokens" in err and "1024 positions" in err


def test_training_refuses_max_completion_length_beyond_the_positions(tmp_path, capsys, no_generation):
    assert _train(tmp_path, max_completion_length=100_000_000) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "max_completion_length=100000000 does not fit the model's 1024 positions" in err


def test_over_budget_rows_are_returned_when_not_refused():
    rows = _rows("short", "x" * 600, "also short", "y" * 700)
    check = check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=40, max_prompt_length=256,
                          refuse=False)
    assert check.too_long == (1, 3) and check.budget == 256
    with pytest.raises(ValueError, match="truncation=drop"):  # the refusal names both other choices
        check_lengths(rows, _tokenize, max_positions=1024, max_completion_length=40, max_prompt_length=256)


def _long_prompt_data(tmp_path):
    data = tmp_path / "mixed.jsonl"
    rows = [{"id": f"ok{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    rows.append({"id": "long", "prompt": "Add these: " + "7 + " * 60 + "7", "answer": "427"})
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return data


def test_truncation_drop_leaves_the_long_prompt_out_and_counts_it(tmp_path, lowercase_reward):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    cfg = build_config(tiny_overrides(tmp_path / "d", data=str(_long_prompt_data(tmp_path)), max_prompt_length=120,
                                      truncation="drop", max_steps=1, reward_funcs=[lowercase_reward]))
    trainer = Trainer(cfg)
    assert [row["id"] for row in trainer.rows] == [f"ok{i}" for i in range(6)]
    (metrics,) = trainer.train()
    assert metrics["data/prompts_dropped"] == 1


def test_truncation_left_keeps_the_last_tokens_and_counts_the_cut_prompts(tmp_path, lowercase_reward):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    cfg = build_config(tiny_overrides(tmp_path / "l", data=str(_long_prompt_data(tmp_path)), max_prompt_length=120,
                                      truncation="left", max_steps=2, prompts_per_step=7, shuffle=False,
                                      reward_funcs=[lowercase_reward]))
    trainer = Trainer(cfg)
    long_row = next(row for row in trainer.rows if row["id"] == "long")
    full = _tokenize(long_row)
    cut = trainer.prompt_builder.ids(long_row)
    assert len(full) > 120 and cut == full[-120:]  # the question's end and the generation prompt are kept
    assert trainer.prompt_builder.ids(trainer.rows[0]) == _tokenize(trainer.rows[0])  # short prompts untouched
    history = trainer.train()
    assert all(m["rollout/prompt_truncated_frac"] == pytest.approx(1 / 7) for m in history)
