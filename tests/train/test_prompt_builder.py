"""Training and evaluation render prompts alike, chat_template_kwargs included."""

from rlvr.eval.runner import prompt_ids
from rlvr.models.tiny import CHATML_TEMPLATE, tiny_byte_tokenizer
from rlvr.train.prompt_builder import PromptBuilder

THINK = "<think>\n\n</think>\n\n"  # what Qwen3's template adds after the generation prompt with enable_thinking=false


def test_training_and_evaluation_prompts_carry_the_chat_template_kwargs():
    tokenizer = tiny_byte_tokenizer()
    tokenizer.chat_template = CHATML_TEMPLATE + (
        "{% if enable_thinking is defined and not enable_thinking %}" + THINK + "{% endif %}")
    row = {"id": "r0", "prompt": "What is 2+3?", "answer": "5"}
    kwargs = {"enable_thinking": False}
    plain = PromptBuilder(tokenizer, system_prompt=None, instruction=None, rephrased=False).ids(row)
    off = PromptBuilder(tokenizer, system_prompt=None, instruction=None, rephrased=False,
                        chat_template_kwargs=kwargs).ids(row)
    assert off[: len(plain)] == plain and tokenizer.decode(off[len(plain):]) == THINK
    assert prompt_ids(tokenizer, row, system_prompt=None, instruction=None, chat_template_kwargs=kwargs) == off
    assert prompt_ids(tokenizer, row, system_prompt=None, instruction=None) == plain
