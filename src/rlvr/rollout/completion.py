"""What an engine returns for one prompt."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolUse:
    """What a response's tool calls did (rlvr.rollout.tool_loop); the metrics are means over the step's responses."""

    calls: int = 0  # calls run
    failures: int = 0  # of them, failed (an error, a timeout, an unknown tool)
    seconds: float = 0.0  # time this response waited for the rounds of calls it was in
    cut_by_call_limit: bool = False  # it still called a tool when max_tool_calling_iterations was reached
    result_dropped: bool = False  # a result did not fit the completion budget: the response ended there
    turns: tuple[tuple[str, str], ...] = ()  # (role, text): the model's turns ("assistant") and results ("tool")
    # chat-template tools: the turns as messages (assistant messages as the template's parser reads them, with their
    # tool_calls; tool messages), as TRL hands a tool run's completions to reward functions; () for text formats
    messages: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Completion:
    """One sampled response."""

    token_ids: list[int]
    logprobs: list[float]  # sampling log-probs, one per token (empty for off-policy anchors)
    truncated: bool
    is_anchor: bool = False  # an expert solution injected by DaGRPO, not sampled from the policy
    tool_mask: tuple[int, ...] | None = None  # per token: 1 the model's, 0 a tool result's (None: all the model's)
    tool_use: ToolUse | None = None  # with tools: what its calls did (None: a run without tools)

