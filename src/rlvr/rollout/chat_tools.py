"""Tool calls as the chat template writes them (TRL 1.16's ``tools=[fn, ...]``): the format of the tool loop
(``rlvr.rollout.tool_loop``) for function tools.

The prompt is rendered with the tools' schemas (``apply_chat_template(tools=...)``: transformers builds each schema from
the function's signature and docstring). A model turn ends at its end-of-turn token and is parsed by the tokenizer's
response parser (transformers' ``parse_response`` with the tokenizer's ``response_template``; where the tokenizer has
none, TRL's ``add_response_schema`` supplies the one for its known templates, as TRL does); every call in the turn runs.
The results are shown as the template shows tool messages: the tokens that rendering ``tool`` messages after an
assistant's tool call adds to the conversation (TRL's ``_get_tool_suffix_ids``), appended as token ids. A turn that does
not parse is plain text (TRL's fallback), and so calls nothing.

What a result says is TRL's: ``str(value)``; a tool that raised (or ran past ``tool_timeout``), or a call to no tool,
``str({"error": message})``, counted as a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlvr.rollout.tool_loop import ToolCall, ToolResult, Turn


class ChatTemplateTools:
    """The format for ``tools`` given as functions (module docstring).

    Args:
        tokenizer: the run's tokenizer; its chat template must render tool calls and tool messages.
        tools: the functions (or their JSON schemas) the prompts are rendered with; they type the parsed arguments.
        chat_template_kwargs: the template's own variables (TRL's option), for the results' rendering too.
    """

    def __init__(self, tokenizer, tools: Sequence[Callable | dict], *, chat_template_kwargs: dict | None = None):
        self.tokenizer, self.tools = tokenizer, list(tools)
        self.template_kwargs = dict(chat_template_kwargs or {})
        self._prefixes: dict[str, list[int]] = {}  # by the first call's name: the rendered assistant turn, EOS-trimmed
        check_tool_template(tokenizer)
        ensure_response_parser(tokenizer)

    def parse_turn(self, context: list[int], turn: list[int]) -> Turn:
        message = parse_message(self.tokenizer, turn, prefix=context, tools=self.tools)
        calls = tuple(ToolCall(call["function"]["name"], dict(call["function"]["arguments"] or {}))
                      for call in message.get("tool_calls") or () if call.get("type", "function") == "function"
                      and isinstance(call.get("function"), dict))
        return Turn(len(turn), calls, message)

    def result_ids(self, turn: list[int], calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> list[int]:
        """The tokens that the tool messages add after the assistant's turn (TRL's ``_get_tool_suffix_ids``)."""
        messages = [{"role": "tool", "name": call.name, "content": result.text} for call, result in zip(calls, results)]
        dummy = [{"role": "user", "content": "dummy"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"type": "function", "function": {"name": calls[0].name, "arguments": {}}}]}]
        prefix = self._prefixes.get(calls[0].name)
        if prefix is None:  # (the same for every round that starts with a call of this tool: rendered once)
            prefix = self.tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True,
                                                        return_dict=False, **self.template_kwargs)
            ends = [i for i, token in enumerate(prefix) if token == self.tokenizer.eos_token_id]
            if ends:  # the assistant turn ends at its EOS (a template's newline after it belongs to the tool's part)
                prefix = prefix[:ends[-1] + 1]
            self._prefixes[calls[0].name] = prefix = list(prefix)
        full = self.tokenizer.apply_chat_template(dummy + messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=False, **self.template_kwargs)
        if list(full[:len(prefix)]) != prefix:
            raise ValueError("the chat template renders an assistant turn differently once tool messages follow it; "
                             "tool results cannot be appended as tokens (use a prefix-preserving chat template)")
        return list(full[len(prefix):])

    def missing_tool(self, name: str, known: Sequence[str]) -> ToolResult:
        return ToolResult(str({"error": f"Tool {name} not found."}), failed=True)


def parse_message(tokenizer, ids: list[int], *, prefix: list[int] | None = None, tools=None) -> dict:
    """The assistant message a turn is (transformers' ``parse_response``), TRL's way: the EOS the parser leaves in
    the content removed, ``content`` always text, a call without arguments given ``{}``; a turn that does not parse
    (a malformed call) is its decoded text."""
    try:
        parsed = tokenizer.parse_response(ids, prefix=prefix, tools=tools)
        if parsed is None:
            raise ValueError("nothing parsed")
        if isinstance(parsed.get("content"), str) and tokenizer.eos_token:
            parsed["content"] = parsed["content"].removesuffix(tokenizer.eos_token)
        if not parsed.get("content"):
            parsed["content"] = ""
        for call in parsed.get("tool_calls") or ():
            function = call.get("function", call) if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError("a tool call without a name")
            if function.get("arguments") is None:
                function["arguments"] = {}
    except (ValueError, TypeError):
        parsed = {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}
    return parsed


def ensure_response_parser(tokenizer) -> None:
    """The tokenizer reads tool calls back: its own ``response_template``, or TRL's for its known chat templates."""
    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return
    try:
        from trl.chat_template_utils import add_response_schema
    except ImportError:
        add_response_schema = None
    if add_response_schema is not None:
        try:
            add_response_schema(tokenizer)
            return
        except ValueError:
            pass
    raise ValueError("tools: the tokenizer cannot read tool calls back (it has no response_template, and its chat "
                     "template is not one TRL knows); set tokenizer.response_template (transformers' docs, 'Response "
                     "parsing'), or use a model whose chat template TRL knows (Qwen2.5/3, Llama 3.1/3.2, ...)"
                     + ("" if add_response_schema is not None else "; or install trl, whose add_response_schema "
                        "knows several templates"))


def check_tool_template(tokenizer) -> None:
    """The chat template renders a whole tool exchange (user, assistant with a call, tool) and keeps the assistant's
    turn when a tool message follows (TRL's ``supports_tool_calling`` and prefix checks)."""
    name, key, value, content = "tool_name_a8f3", "arg_key_b9d4", "arg_val_d6e7", "tool_content_c4f9"
    call = [{"type": "function", "function": {"name": name, "arguments": {key: value}}}]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": call},
                {"role": "tool", "name": name, "content": content}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # noqa: BLE001  (a template that rejects the tool role)
        text = ""
    if getattr(tokenizer, "chat_template", None) is None or not all(s in text for s in (name, key, value, content)):
        raise ValueError("tools: the tokenizer's chat template cannot render a tool call and its result (user -> "
                         "assistant with tool_calls -> tool); use a model whose template supports tools, or set "
                         "chat_template to one that does")
    first = tokenizer.apply_chat_template(messages[:2], tokenize=True, return_dict=False)
    both = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=True)
    if list(both[:len(first)]) != list(first):
        raise ValueError("tools: the chat template renders the assistant's turn differently once a tool message "
                         "follows (it is not prefix-preserving, e.g. Qwen3's, which drops earlier reasoning), so "
                         "results cannot be appended as tokens; set chat_template to a prefix-preserving version "
                         "(TRL's get_training_chat_template gives one for known models)")
