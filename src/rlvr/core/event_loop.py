"""One asyncio event loop per purpose, on a daemon thread of its own, for the user's ``async def`` functions (reward
functions, tools) called from synchronous code (TRL runs its async rewards and tools the same way)."""

from __future__ import annotations

import asyncio
import threading

_loops: dict[str, asyncio.AbstractEventLoop] = {}
_lock = threading.Lock()


def daemon_event_loop(name: str) -> asyncio.AbstractEventLoop:
    """The running loop called ``name`` (its thread's name), started at the first call."""
    with _lock:
        if name not in _loops:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=name, daemon=True).start()
            _loops[name] = loop
        return _loops[name]
