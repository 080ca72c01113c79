"""Turn a row's prompt into chat messages and render them with the model's chat template.

String prompt → [system?] + one user message "<prompt>\\n\\n<instruction>".
Message-list prompt → a copy; the system prompt is prepended only when the list has no system
message (the dataset's own system message wins), and the instruction is appended after a blank
line to the *last* user message.
`None` means "no system prompt" / "no instruction"; an empty string is rejected, so a config typo
cannot silently drop the instruction.
"""

from __future__ import annotations

from typing import Any

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def _check_optional_text(value: str | None, name: str) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} is {value!r}; give non-empty text, or None for no {name.replace('_', ' ')}")


def _with_instruction(content: str, instruction: str | None) -> str:
    return content if instruction is None else f"{content}\n\n{instruction}"


def prompt_messages(
    prompt: str | list[dict], *, system_prompt: str | None, instruction: str | None
) -> list[dict]:
    """Chat messages for one prompt; the input is never modified."""
    _check_optional_text(system_prompt, "system_prompt")
    _check_optional_text(instruction, "instruction")
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": _with_instruction(prompt, instruction)}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        return messages
    if not isinstance(prompt, (list, tuple)):
        raise ValueError(
            f"prompt is a {type(prompt).__name__}; give a string or a list of {{role, content}} messages "
            "(normalize rows with rlvr.data.normalize_rows first)"
        )
    messages = [dict(message) for message in prompt]
    user_positions = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    if not user_positions:
        raise ValueError("prompt messages have no user message; add one with the question")
    last_user = messages[user_positions[-1]]
    last_user["content"] = _with_instruction(last_user["content"], instruction)
    if system_prompt is not None and not any(message.get("role") == "system" for message in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


# apply_chat_template's own arguments, which render_prompt sets: not template variables
_RENDER_ARGUMENTS = ("conversation", "tokenize", "add_generation_prompt", "return_dict", "return_tensors",
                     "continue_final_message")


def render_prompt(tokenizer: Any, messages: list[dict], *, chat_template_kwargs: dict | None = None) -> str:
    """The prompt text the model sees: the tokenizer's chat template with a generation prompt.

    ``chat_template_kwargs`` (TRL's name): extra variables the template reads, e.g.
    ``{"enable_thinking": False}`` for Qwen3's; None: none.
    """
    extra = dict(chat_template_kwargs or {})
    clash = sorted(set(extra) & set(_RENDER_ARGUMENTS))
    if clash:
        raise ValueError(f"chat_template_kwargs sets {clash}, which rlvr sets itself when rendering a prompt; "
                         "remove them (give only the template's own variables, e.g. enable_thinking)")
    if getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"tokenizer {name!r} has no chat template; use a chat/instruct model, or set "
            "tokenizer.chat_template to a Jinja template before training"
        )
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **extra)
    assert isinstance(text, str), f"apply_chat_template(tokenize=False) returned {type(text).__name__}"
    return text
