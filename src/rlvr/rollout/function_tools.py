"""Python functions as tools (TRL's ``tools=[fn, ...]``): each call runs in the trainer's process, as in TRL, with a
time limit.

A function is called with the call's arguments as keywords; its value is shown as ``str(value)``; an exception, or a
call still running after ``timeout`` seconds, is shown as ``str({"error": message})`` and counted as a failure (TRL's
texts). A synchronous function runs on a daemon thread, one call after another in the order the calls were made
(TRL's order), and is abandoned, not killed, when it passes the limit (Python cannot stop a thread: a tool that never
returns keeps its thread; the run goes on). ``async def`` tools run together on one event loop of their own (a
daemon thread, as TRL's), each with the limit; as in TRL, a turn's async results are shown after its other ones.

These functions are the user's own code, trusted as the trainer is: model-written code runs only in the sandbox
(the built-in ``python`` tool, ``rlvr.rewards.sandbox.notebook``). A tool the model should not be able to misuse
must check its own arguments.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import replace

from rlvr.core.event_loop import daemon_event_loop
from rlvr.rollout.tool_loop import ToolCall, ToolResult, ToolRunner


def function_runner(fn: Callable, *, timeout: float) -> ToolRunner:
    """The runner of one function tool (module docstring)."""
    if inspect.iscoroutinefunction(fn):
        def run_async(calls: list[ToolCall]) -> list[ToolResult]:
            async def one(call):
                return await asyncio.wait_for(fn(**call.arguments), timeout)

            async def all_of(calls):
                return await asyncio.gather(*(one(call) for call in calls), return_exceptions=True)

            values = asyncio.run_coroutine_threadsafe(all_of(calls), _event_loop()).result()
            return [replace(tool_result(value, isinstance(value, BaseException), timeout), deferred=True)
                    for value in values]
        return run_async

    def run(calls: list[ToolCall]) -> list[ToolResult]:
        results = []
        for call in calls:
            box: dict = {}

            def target(call=call, box=box):
                try:
                    box["value"] = fn(**call.arguments)
                except Exception as error:  # noqa: BLE001  (the user's tool: any error is the call's result)
                    box["error"] = error

            thread = threading.Thread(target=target, name=f"tool-{getattr(fn, '__name__', 'tool')}", daemon=True)
            thread.start()
            thread.join(timeout)
            if thread.is_alive():
                results.append(tool_result(TimeoutError(), True, timeout))
            else:
                results.append(tool_result(box.get("error", box.get("value")), "error" in box, timeout))
        return results
    return run


def tool_result(value, failed: bool, timeout: float) -> ToolResult:
    """A call's result as TRL shows it: ``str(value)``, or ``str({'error': message})`` (a time-out named)."""
    if not failed:
        return ToolResult(str(value))
    if isinstance(value, (TimeoutError, asyncio.TimeoutError)) and not str(value):
        value = f"the tool did not return within tool_timeout={timeout:g} s"
    return ToolResult(str({"error": str(value)}), failed=True)


def _event_loop() -> asyncio.AbstractEventLoop:
    """One event loop on a daemon thread for every async tool of the process (started at the first call)."""
    return daemon_event_loop("rlvr-async-tools")
