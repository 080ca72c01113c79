"""The prompts a run trains on: training and evaluation render them alike; a prompt that carries its own
instruction, or comes as a chat (verl's rows, TRL's conversational datasets), is never rewritten; a config in
TRL's terms feeds plain strings as raw text, as TRL does, and a base model without a chat template works."""

import pytest

from rlvr.config import build_config
from rlvr.data import DEFAULT_INSTRUCTION, PromptFormat
from rlvr.data.prompts import PromptBuilder, carries_instruction
from rlvr.eval.runner import prompt_ids
from rlvr.models.tiny import CHATML_TEMPLATE, tiny_byte_tokenizer
from rlvr.train.setup import chat_rows, prompt_format, question_rows

THINK = "<think>\n\n</think>\n\n"  # what Qwen3's template adds after the generation prompt with enable_thinking=false
VERL_QUESTION = ('Natalia sold clips to 48 of her friends in April. How many clips? Let\'s think step by step and '
                 'output the final answer after "####".')


def _ids(tokenizer, prompt, **format_options) -> list[int]:
    return PromptBuilder(tokenizer, PromptFormat(**format_options), rephrased=False).ids({"id": "r", "prompt": prompt})


def _chat(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_training_and_evaluation_prompts_carry_the_chat_template_kwargs():
    tokenizer = tiny_byte_tokenizer()
    tokenizer.chat_template = CHATML_TEMPLATE + (
        "{% if enable_thinking is defined and not enable_thinking %}" + THINK + "{% endif %}")
    row = {"id": "r0", "prompt": "What is 2+3?", "answer": "5"}
    kwargs = {"enable_thinking": False}
    plain = _ids(tokenizer, row["prompt"], instruction=None)
    off = _ids(tokenizer, row["prompt"], instruction=None, chat_template_kwargs=kwargs)
    assert off[: len(plain)] == plain and tokenizer.decode(off[len(plain):]) == THINK
    assert prompt_ids(tokenizer, row, system_prompt=None, instruction=None, chat_template_kwargs=kwargs) == off
    assert prompt_ids(tokenizer, row, system_prompt=None, instruction=None) == plain


def test_a_chat_prompt_is_never_rewritten_by_the_default_instruction():
    """verl's gsm8k row: its own "####" instruction only, through the chat template as it is."""
    tokenizer = tiny_byte_tokenizer()
    messages = [{"role": "user", "content": VERL_QUESTION}]
    assert _ids(tokenizer, messages) == _chat(tokenizer, messages)  # instruction=auto, rlvr's default
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    assert _ids(tokenizer, conversation) == _chat(tokenizer, conversation)  # no question of its own either


def test_the_default_instruction_goes_only_to_plain_questions_without_one():
    tokenizer = tiny_byte_tokenizer()
    asked = [{"role": "user", "content": f"What is 2+3?\n\n{DEFAULT_INSTRUCTION}"}]
    assert _ids(tokenizer, "What is 2+3?") == _chat(tokenizer, asked)
    for own in (VERL_QUESTION, "What is 2+3? Put the answer in \\boxed{}.", "Give the final answer: 2+3"):
        assert carries_instruction(own)
        assert _ids(tokenizer, own) == _chat(tokenizer, [{"role": "user", "content": own}])
    # an instruction the user wrote in the config goes to every question, chats included
    assert _ids(tokenizer, [{"role": "user", "content": "Q"}], instruction="Answer.") == _chat(
        tokenizer, [{"role": "user", "content": "Q\n\nAnswer."}])


def test_raw_strings_are_tokenized_as_trl_does():
    """TRL feeds a plain-string prompt as text: ``processing_class(text=prompts)``, special tokens added."""
    tokenizer = tiny_byte_tokenizer()
    assert _ids(tokenizer, "What is 2+3?", instruction=None, raw_strings=True) == tokenizer("What is 2+3?")["input_ids"]
    messages = [{"role": "user", "content": "Q"}]  # a chat is still a chat
    assert _ids(tokenizer, messages, instruction=None, raw_strings=True) == _chat(tokenizer, messages)


def test_a_trl_config_feeds_strings_raw_and_open_r1_makes_them_chats():
    tokenizer = tiny_byte_tokenizer()
    rows = [{"id": "r", "prompt": "What is 2+3?", "problem": "What is 4+4?", "answer": "8"}]
    trl = build_config({"model_name_or_path": "tiny-random"})
    assert prompt_format(trl, tokenizer, rows, tools=None) == PromptFormat(instruction=None, raw_strings=True)
    assert question_rows(rows, trl) == rows and chat_rows(rows, trl) == rows
    open_r1 = build_config({"model_name_or_path": "tiny-random", "dataset_prompt_column": "problem",
                            "system_prompt": "Think first."})
    shaped = chat_rows(question_rows(rows, open_r1), open_r1)
    assert shaped[0]["prompt"] == [{"role": "system", "content": "Think first."},
                                   {"role": "user", "content": "What is 4+4?"}]  # open-r1's make_conversation
    assert prompt_format(open_r1, tokenizer, shaped, tools=None).system_prompt is None  # (the chat holds it already)
    with pytest.raises(ValueError, match="dataset_prompt_column='question' is not one of its columns"):
        question_rows(rows, build_config({"dataset_prompt_column": "question"}))


def test_a_base_model_without_a_chat_template_gets_raw_text():
    tokenizer = tiny_byte_tokenizer()
    tokenizer.chat_template = None
    rows = [{"id": "r", "prompt": "What is 2+3?", "answer": "5"}]
    cfg = build_config({"model": "tiny-random"})  # rlvr's own defaults
    fmt = prompt_format(cfg, tokenizer, rows, tools=None)
    assert fmt.raw_strings and fmt.instruction == "auto"
    assert PromptBuilder(tokenizer, fmt, rephrased=False).ids(rows[0]) == tokenizer(
        f"What is 2+3?\n\n{DEFAULT_INSTRUCTION}")["input_ids"]
    with pytest.raises(ValueError, match="no chat template, but 1 prompts of .* are chats"):
        prompt_format(cfg, tokenizer, [{"id": "c", "prompt": [{"role": "user", "content": "Q"}], "answer": "1"}],
                      tools=None)
    with pytest.raises(ValueError, match="system_prompt needs a chat template"):
        prompt_format(build_config({"system_prompt": "Be brief."}), tokenizer, rows, tools=None)


def test_a_rephrasing_is_asked_the_way_its_question_is():
    """TA-GRPO's variants of a question get the instruction the question got (auto decides on q_0)."""
    tokenizer = tiny_byte_tokenizer()
    builder = PromptBuilder(tokenizer, PromptFormat(), rephrased=True)
    own = {"id": "a", "prompt": "What is 2+3? Give the final answer after ####.", "rephrasings": ["Add 2 and 3."]}
    plain = {"id": "b", "prompt": "What is 2+3?", "rephrasings": ["Add 2 and 3."]}
    assert builder.ids(own, 1) == _chat(tokenizer, [{"role": "user", "content": "Add 2 and 3."}])
    assert builder.ids(plain, 1) == _chat(tokenizer, [{"role": "user", "content": f"Add 2 and 3.\n\n{DEFAULT_INSTRUCTION}"}])
