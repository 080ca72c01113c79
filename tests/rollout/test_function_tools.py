"""Functions as tools (rlvr.rollout.function_tools, rlvr.rollout.chat_tools): what a call's result says, the time
limit, async tools, the template checks, and the options that configure them."""

from __future__ import annotations

import asyncio
import time

import pytest

from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.rollout.function_tools import function_runner
from rlvr.rollout.tool_loop import ToolCall


def multiply(a: int, b: int) -> int:
    """Multiply.

    Args:
        a: first
        b: second
    """
    return a * b


def test_a_value_is_shown_as_text_and_an_error_as_trls_error_dict():
    run = function_runner(multiply, timeout=5)
    good, bad = run([ToolCall("multiply", {"a": 3, "b": 4}), ToolCall("multiply", {"a": 3})])
    assert (good.text, good.failed) == ("12", False)
    assert bad.failed and bad.text.startswith("{'error': ") and "missing 1 required positional argument" in bad.text


def test_a_call_past_the_time_limit_fails_and_the_run_goes_on():
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    run = function_runner(slow, timeout=0.2)
    started = time.monotonic()
    late, quick = run([ToolCall("slow", {"seconds": 5}), ToolCall("slow", {"seconds": 0})])
    assert time.monotonic() - started < 2
    assert late.failed and "tool_timeout=0.2" in late.text
    assert (quick.text, quick.failed) == ("done", False)


def test_async_tools_run_together_each_with_the_limit():
    async def wait(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"waited {seconds}"

    run = function_runner(wait, timeout=1.0)
    started = time.monotonic()
    results = run([ToolCall("wait", {"seconds": 0.3}) for _ in range(4)] + [ToolCall("wait", {"seconds": 5})])
    assert time.monotonic() - started < 2.5  # together: not 4 x 0.3 s + 1 s one after another... and not 5 s
    assert [r.text for r in results[:4]] == ["waited 0.3"] * 4 and not any(r.failed for r in results[:4])
    assert results[4].failed and "tool_timeout=1" in results[4].text


def test_a_template_without_tools_is_refused_with_the_fix():
    from rlvr.rollout.chat_tools import ChatTemplateTools

    with pytest.raises(ValueError, match="cannot render a tool call"):
        ChatTemplateTools(tiny_byte_tokenizer(), [multiply])  # the tiny ChatML template drops tool_calls


def test_qwen3s_template_is_refused_as_not_prefix_preserving():
    trl = pytest.importorskip("trl.chat_template_utils")
    tokenizer = tiny_byte_tokenizer()
    tokenizer.chat_template = trl.qwen3_chat_template
    from rlvr.rollout.chat_tools import ChatTemplateTools

    with pytest.raises(ValueError, match="not prefix-preserving"):
        ChatTemplateTools(tokenizer, [multiply])


def test_a_malformed_call_is_plain_text_and_calls_nothing():
    trl = pytest.importorskip("trl.chat_template_utils")
    from rlvr.rollout.chat_tools import ChatTemplateTools

    tokenizer = tiny_byte_tokenizer()
    tokenizer.chat_template = trl.qwen2_5_chat_template
    tools = ChatTemplateTools(tokenizer, [multiply])
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)
    good = tools.parse_turn([], encode('<tool_call>\n{"name": "multiply", "arguments": {"a": "3", "b": 4}}\n'
                                       '</tool_call><|im_end|>'))
    assert good.calls == (ToolCall("multiply", {"a": 3, "b": 4}),)  # "3" typed by the schema: an integer
    broken = tools.parse_turn([], encode('<tool_call>\n{"name": "multiply", "argu<|im_end|>'))
    assert broken.calls == () and broken.message["content"].startswith("<tool_call>")


# ---- the options ------------------------------------------------------------------------------------------------

def _config(**overrides):
    from rlvr.config import build_config

    return build_config({"model": "tiny-random", "data": "gsm8k100", **overrides})


def test_tools_from_python_are_recorded_by_name_and_loaded_from_a_file(tmp_path):
    from rlvr.train.plan import tool_settings

    cfg = _config(tools=[multiply])
    assert cfg.rollout.tools == [f"{__name__}.multiply"] and dict(cfg.python.tools)[cfg.rollout.tools[0]] is multiply
    settings = tool_settings(cfg)
    assert settings.names == ("multiply",) and settings.functions == (multiply,) and not settings.builtin
    (tmp_path / "my_tools.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")
    settings = tool_settings(_config(tools=f"{tmp_path / 'my_tools.py'}:add", tool_timeout=3))
    assert settings.names == ("add",) and settings.functions[0](a=1, b=2) == 3 and settings.timeout == 3
    assert tool_settings(_config(tools="python")).builtin


@pytest.mark.parametrize(("tools", "message"), [(["python", "x.py:f"], "give it alone"), ([], "at least one tool")])
def test_bad_tools_are_refused(tools, message):
    with pytest.raises(ValueError, match=message):
        _config(tools=tools)


def test_two_tools_of_one_name_are_refused():
    from rlvr.train.plan import tool_settings

    def add(a: int) -> int:
        return a

    other = add
    with pytest.raises(ValueError, match="two tools are called 'add'"):
        tool_settings(_config(tools=[add, lambda a: a, other]))


def test_function_tools_with_raw_string_prompts_are_refused():
    from rlvr.models.tiny import tiny_byte_tokenizer as tok
    from rlvr.train.plan import tool_settings
    from rlvr.train.setup import prompt_format

    cfg = _config(tools=[multiply], preset="trl")
    with pytest.raises(ValueError, match="plain strings fed as raw text"):
        prompt_format(cfg, tok(), [{"prompt": "What is 2 + 2?"}], tools=tool_settings(cfg))


def test_tool_scheduling_is_checked_before_the_model_loads():
    """An unknown schedule, and rows with an engine that seeds whole batches (hf), are refused by the config and
    the plan (so --dry-run says it too), not after the model loaded."""
    from rlvr.train.plan import compile_plan

    with pytest.raises(ValueError, match="tool_scheduling.*choose one of"):
        _config(tools="python", tool_scheduling="async")
    with pytest.raises(ValueError, match="tool_scheduling=rows needs an engine that seeds each row.*HFEngine"):
        compile_plan(_config(tools="python", tool_scheduling="rows", rollout_engine="hf"), world_size=1)
    assert compile_plan(_config(tools="python", tool_scheduling="rows"), world_size=1).rollout.tools.scheduling == "rows"
