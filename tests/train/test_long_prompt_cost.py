"""A prompt of megabytes costs milliseconds, not a tokenisation of megabytes (rlvr.data.input_limits).

A 10 MB prompt was refused only after 102 s and 3.46 GB of tokenising (issue 41): beyond
CHARS_PER_TOKEN characters a token of the budget it is over in any tokenizer (refused or dropped
untokenised), and truncation=left cuts its characters before tokenising.
"""

import json
import time

import pytest

from rlvr.cli import main
from rlvr.data import DEFAULT_INSTRUCTION, prompt_messages, render_prompt
from rlvr.data.input_limits import check_lengths
from rlvr.data.prompts import CHARS_PER_TOKEN, PromptBuilder, PromptFormat
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout.base import LocalEngine

from .conftest import tiny_overrides

_, TOKENIZER = tiny_random_model_and_tokenizer(0)  # 1,024 positions, one token per byte
TEN_MB = "What is 2 + 2? " + "lorem ipsum dolor sit amet " * 400_000


def _data(tmp_path, prompt):
    data = tmp_path / "big.jsonl"
    rows = [{"id": "ok", "prompt": "What is 1 + 1?", "answer": "2"}, {"id": "huge", "prompt": prompt, "answer": "4"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(data)


def test_a_10_mb_prompt_is_refused_in_seconds_naming_the_row(tmp_path, capsys, monkeypatch):
    def generate(self, *args, **kwargs):
        raise AssertionError("generation started: the start-up length check did not run")

    monkeypatch.setattr(LocalEngine, "generate", generate)
    options = tiny_overrides(tmp_path / "run", data=_data(tmp_path, TEN_MB), max_steps=1, prompts_per_step=2,
                             num_generations=2)
    start = time.monotonic()
    assert main(["train", *[f"{key}={value}" for key, value in options.items()]]) == 2
    assert time.monotonic() - start < 20  # a bound against the 100 s tokenisation, not a benchmark
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"row 1 (id 'huge') has over {CHARS_PER_TOKEN * (1024 - 12)} characters" in err and "truncation=left" in err


def test_a_row_over_the_characters_is_never_tokenised():
    def tokenize(row):
        assert row["id"] != "huge", "the over-long row was tokenised"
        messages = prompt_messages(row["prompt"], system_prompt=None, instruction=DEFAULT_INSTRUCTION)
        return TOKENIZER(render_prompt(TOKENIZER, messages), add_special_tokens=False)["input_ids"]

    rows = [{"id": "ok", "prompt": "x" * 300}, {"id": "huge", "prompt": "x" * (CHARS_PER_TOKEN * 256 + 1)}]
    check = check_lengths(rows, tokenize, max_positions=1024, max_completion_length=40, max_prompt_length=256,
                          template_bytes=0, refuse=False)
    assert check.too_long == (0, 1) and check.tokenized == 1  # 300 one-byte tokens: tokenised, over too


@pytest.mark.parametrize("prompt", ["a b c " * 40_000, [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": "z y " * 50_000}]])
def test_left_truncation_of_a_cut_prompt_keeps_the_same_last_tokens(prompt):
    fmt = PromptFormat()
    full = fmt.token_ids(TOKENIZER, prompt)  # 200 kB: a few hundred ms with one token per byte
    builder = PromptBuilder(TOKENIZER, fmt, rephrased=False)
    builder.truncate_to(100)
    assert builder.ids({"id": "r", "prompt": prompt}) == full[-100:]


def test_truncation_left_sets_up_a_run_on_a_10_mb_prompt_in_seconds(tmp_path, lowercase_reward):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    cfg = build_config(tiny_overrides(tmp_path / "l", data=_data(tmp_path, TEN_MB), truncation="left",
                                      max_prompt_length=120, prompts_per_step=2, max_steps=1,
                                      reward_funcs=[lowercase_reward]))
    start = time.monotonic()
    trainer = Trainer(cfg)
    ids = trainer.prompt_builder.ids(next(row for row in trainer.rows if row["id"] == "huge"))
    assert time.monotonic() - start < 20 and len(ids) == 120
    assert "lorem ipsum dolor sit amet" in TOKENIZER.decode(ids)  # the end of the question kept
