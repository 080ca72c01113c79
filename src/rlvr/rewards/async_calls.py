"""``async def`` reward functions: run on one event loop in a daemon thread, concurrently (as TRL does).

TRL's GRPOTrainer starts one event loop in a daemon thread when a reward function is async and
runs every async function of a batch with ``asyncio.gather`` on it; ``combine_rewards`` does the
same through :func:`submit`: each call is a future on the shared loop, so the async functions of a
batch run concurrently with each other (and with the sync ones, which run in the caller's thread).
One loop for the whole process keeps clients that bind to their first loop (``httpx.AsyncClient``,
``openai.AsyncOpenAI``) working from call to call.

Convention: a call past ``timeout_s`` is cancelled (``asyncio.wait_for``) and raises TimeoutError
in the caller; the function's exceptions are re-raised in the caller like a sync function's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Callable

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def is_async_callable(fn: Callable) -> bool:
    """True when calling ``fn`` returns a coroutine: ``async def`` functions, partials of them, and
    objects whose ``__call__`` is ``async def`` (TRL's ``is_async_callable``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _event_loop() -> asyncio.AbstractEventLoop:
    """The process's reward event loop, started on first use in a daemon thread."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="rlvr-async-rewards", daemon=True).start()
            _loop = loop
        return _loop


def submit(fn: Callable, kwargs: dict, timeout_s: float | None) -> concurrent.futures.Future:
    """Start ``await fn(**kwargs)`` on the reward loop; ``.result()`` gives its value or raises its error."""

    async def call():
        try:  # fn(**kwargs) is evaluated in here, so a wrong signature's TypeError reaches the caller too
            return await asyncio.wait_for(fn(**kwargs), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"did not return within reward_timeout={timeout_s:g} s") from None

    return asyncio.run_coroutine_threadsafe(call(), _event_loop())
