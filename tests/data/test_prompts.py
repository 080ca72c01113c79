import copy

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlvr.data import DEFAULT_INSTRUCTION, prompt_messages, render_prompt

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tokenizer(chat_template):
    vocab = {"[UNK]": 0, "hi": 1}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    tokenizer.chat_template = chat_template
    return tokenizer


def test_default_instruction_text():
    assert DEFAULT_INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."


def test_string_prompt_with_system_and_instruction():
    assert prompt_messages("What is 2+3?", system_prompt="You are careful.", instruction=DEFAULT_INSTRUCTION) == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "What is 2+3?\n\n" + DEFAULT_INSTRUCTION},
    ]


def test_string_prompt_bare():
    assert prompt_messages("What is 2+3?", system_prompt=None, instruction=None) == [
        {"role": "user", "content": "What is 2+3?"}
    ]


def test_message_prompt_gets_system_and_instruction_on_last_user_message():
    prompt = [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "And 2+2?"},
    ]
    before = copy.deepcopy(prompt)
    assert prompt_messages(prompt, system_prompt="Be brief.", instruction="Box it.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "And 2+2?\n\nBox it."},
    ]
    assert prompt == before  # input untouched


def test_message_prompt_keeps_its_own_system_message():
    prompt = [{"role": "system", "content": "Dataset system."}, {"role": "user", "content": "q"}]
    assert prompt_messages(prompt, system_prompt="Config system.", instruction=None) == prompt


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"system_prompt": "", "instruction": None}, "system_prompt"),
        ({"system_prompt": None, "instruction": "  "}, "instruction"),
    ],
)
def test_empty_texts_are_rejected_not_dropped(kwargs, name):
    with pytest.raises(ValueError, match=f"{name} is .*or None for no"):
        prompt_messages("q", **kwargs)


def test_message_prompt_without_user_message():
    with pytest.raises(ValueError, match="no user message"):
        prompt_messages([{"role": "system", "content": "s"}], system_prompt=None, instruction="x")


def test_render_prompt_uses_chat_template_with_generation_prompt():
    messages = prompt_messages("What is 2+3?", system_prompt="Be careful.", instruction="Box it.")
    text = render_prompt(_tokenizer(TEMPLATE), messages)
    assert text == "<|system|>Be careful.\n<|user|>What is 2+3?\n\nBox it.\n<|assistant|>"


def test_render_prompt_without_chat_template():
    message = "has no chat template, which chat-format prompts .* need; .* set chat_template to a Jinja template"
    with pytest.raises(ValueError, match=message):
        render_prompt(_tokenizer(None), [{"role": "user", "content": "hi"}])


# Qwen3's switch, reduced: enable_thinking=false pre-fills an empty think block after the generation prompt
THINKING_TEMPLATE = TEMPLATE + "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"


def test_chat_template_kwargs_reach_the_template():
    messages = prompt_messages("What is 2+3?", system_prompt=None, instruction=None)
    tokenizer = _tokenizer(THINKING_TEMPLATE)
    plain = render_prompt(tokenizer, messages)
    assert plain == "<|user|>What is 2+3?\n<|assistant|>"
    off = render_prompt(tokenizer, messages, chat_template_kwargs={"enable_thinking": False})
    assert off == plain + "<think></think>"
    assert render_prompt(tokenizer, messages, chat_template_kwargs={"enable_thinking": True}) == plain


def test_chat_template_kwargs_count_in_the_template_bytes():
    from rlvr.data.input_limits import template_bytes

    tokenizer = _tokenizer(THINKING_TEMPLATE)
    plain = template_bytes(tokenizer, system_prompt=None, instruction=None)
    off = template_bytes(tokenizer, system_prompt=None, instruction=None,
                         chat_template_kwargs={"enable_thinking": False})
    assert off == plain + len("<think></think>")


def test_chat_template_kwargs_may_not_set_the_rendering_arguments():
    with pytest.raises(ValueError, match="add_generation_prompt.*rlvr sets itself"):
        render_prompt(_tokenizer(TEMPLATE), [{"role": "user", "content": "hi"}],
                      chat_template_kwargs={"add_generation_prompt": False})

