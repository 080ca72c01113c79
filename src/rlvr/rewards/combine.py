"""Calling reward functions: each once per batch, and their weighted sum per completion (TRL-style).

``combine_rewards`` calls every function once per batch (``async def`` ones concurrently on one event
loop in a daemon thread, as TRL does: one loop for the whole process keeps clients that bind to their
first loop, ``httpx.AsyncClient`` or ``openai.AsyncOpenAI``, working from call to call) and sums the
weighted values:

    total_i = Σ_f w_f · r_f,i   over the f with r_f,i not None   (TRL: nansum)

Convention: a function that raises, returns the wrong length or returns non-numbers contributes
None for the whole batch (counted in ``<name>/errors``, the exception handed back through
``failures``; so does a call past ``timeout_s`` — an async one is cancelled — and a ``SystemExit``
raised by user code); a NaN, ±inf, float-overflowing (``10**400``) or absurd (beyond ±1e12) value
becomes None (``<name>/nonfinite``); a completion where every function gave None totals 0.0 and is
counted in ``all_none`` (the trainer leaves such a completion out of its group's statistics and gives
it advantage 0, see ``rlvr.train.experience``). User reward code is model-facing, so a failure never
raises here; whether the run goes on is the caller's decision (``rlvr.train.rewarding``: a function
that fails at every call stops the run). Which callable a config name means is ``registry.py``'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import math
import numbers
import os
import threading
from collections.abc import Callable, Sequence

from rlvr.core.event_loop import daemon_event_loop
from rlvr.rewards.reward_function import RewardFunction as RewardFn

logger = logging.getLogger(__name__)

MAX_ABS_REWARD = 1e12  # larger values are treated like inf: counted in <name>/nonfinite, dropped
MAX_ABS_WEIGHT = 1e6  # so that a weighted sum of rewards can never overflow


def reward_name(fn) -> str:
    """The name a reward is logged under: its ``__name__``, else its class name."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def logged_names(funcs: Sequence[RewardFn]) -> list[str]:
    """The names ``combine_rewards`` logs the functions under, in order (duplicates get ``_2``, …)."""
    names: dict[str, None] = {}
    for fn in funcs:
        names[_unique(reward_name(fn), names)] = None
    return list(names)


def combine_rewards(
    funcs: Sequence[RewardFn],
    weights: Sequence[float] | None,
    prompts: list,
    completions: list,
    columns: dict[str, list],
    *,
    failures: dict[str, str] | None = None,
    timeout_s: float | None = None,
    extra_kwargs: dict | None = None,
    gold: list | None = None,
) -> tuple[list[float], dict[str, list[float | None]], dict[str, int]]:
    """Weighted sum of several reward functions per completion (TRL's nansum semantics).

    total_i = Σ_f w_f · r_f,i over non-None r_f,i; 0.0 (and ``all_none`` += 1) if none.

    Args:
        funcs: reward callables ``fn(prompts=..., completions=..., **columns)``; N = len(completions).
        weights: one float per function; None means all 1.0.
        prompts, completions: the batch, N entries each.
        columns: extra dataset columns (e.g. ``answer``), each a list of N entries.
        extra_kwargs: the other keyword arguments every function gets, TRL's (``completion_ids``,
            ``trainer_state``, ``log_extra``, ``log_metric``; ``rlvr.train.rewarding`` fills them).
        gold: rlvr's gold answer of each completion (N entries), given as ``answer`` to the functions that
            declare ``reads_gold`` (rlvr's verifier), whatever ``columns`` hold: a TRL dataset's columns are
            passed as they are, with no ``answer`` unless the dataset has one.
        failures: when given, filled with ``{name: "ExceptionType: message"}`` for every function
            whose call failed (raised, or returned the wrong length or non-numbers), so a caller
            can stop a run with the cause (``rlvr.train.rewarding``).
        timeout_s: seconds one function's call may take (None: no limit). The call runs in a
            daemon thread; past the limit it counts as failed (``TimeoutError``) and the thread is
            left behind (Python cannot stop a thread: a function that never returns keeps its
            thread; the run goes on, and the failure policy stops it if every call hangs). An
            ``async def`` function past the limit is cancelled.

    Returns:
        totals [N]; per-function values {name: [N] float|None} (duplicate names get ``_2``, …);
        counts {``<name>/errors``, ``<name>/nonfinite``, ``all_none``}.
    """
    weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(funcs):
        raise ValueError(f"got {len(weights)} reward weights for {len(funcs)} reward functions; "
                         "give one weight per function (or none for all 1.0)")
    if not all(math.isfinite(w) and abs(w) <= MAX_ABS_WEIGHT for w in weights):
        raise ValueError(f"reward weights must be finite and at most {MAX_ABS_WEIGHT:g} in size, got {weights}")
    n = len(completions)
    extra_kwargs = extra_kwargs or {}
    for key, column in columns.items():
        if key in ("prompts", "completions", *extra_kwargs):
            raise ValueError(f"columns has a {key!r} key, which would clash with the argument of "
                             "the same name; rename that dataset column")
        if len(column) != n:
            raise ValueError(f"column {key!r} has {len(column)} entries for {n} completions; "
                             "repeat each row's value once per generated completion")
    kwargs = {"prompts": prompts, "completions": completions, **columns, **extra_kwargs}
    names = logged_names(funcs)
    # async functions start first, on the shared loop, so they run while the sync ones do
    started = {name: submit(fn, _arguments(fn, kwargs, gold), timeout_s)
               for fn, name in zip(funcs, names) if is_async_callable(fn)}
    per_func: dict[str, list[float | None]] = {}
    counts: dict[str, int] = {}
    cwd = os.getcwd()
    for fn, name in zip(funcs, names):
        if name in started:
            call = started[name].result
        else:
            arguments = _arguments(fn, kwargs, gold)
            call = lambda fn=fn, arguments=arguments: _call_bounded(lambda: fn(**arguments), timeout_s)
        values, errors, nonfinite, failure = _call_reward(call, name, n)
        _keep_cwd(cwd, name if name not in started else f"{name} (or another async reward: {', '.join(started)})")
        if failure is not None and failures is not None:
            failures[name] = failure
        per_func[name] = values
        counts[f"{name}/errors"] = errors
        counts[f"{name}/nonfinite"] = nonfinite
    totals, all_none = [], 0
    for i in range(n):
        present = [(w, vals[i]) for w, vals in zip(weights, per_func.values()) if vals[i] is not None]
        all_none += not present
        totals.append(sum(w * v for w, v in present) if present else 0.0)
    counts["all_none"] = all_none
    return totals, per_func, counts


def _arguments(fn, kwargs: dict, gold: list | None) -> dict:
    """``kwargs``, with ``gold`` as ``answer`` for a function that declares ``reads_gold``."""
    return {**kwargs, "answer": gold} if gold is not None and getattr(fn, "reads_gold", False) else kwargs


_CWD_WARNED: set[str] = set()


def _keep_cwd(cwd: str, name: str) -> None:
    """If the reward ``name`` changed the working directory, say so (once per function) and change it back:
    the run writes to absolute paths, but a relative path anywhere else would now point elsewhere."""
    try:
        now = os.getcwd()
    except FileNotFoundError:  # it moved into a folder that was then deleted
        now = "(a deleted folder)"
    if now == cwd:
        return
    if name not in _CWD_WARNED:
        _CWD_WARNED.add(name)
        logger.warning("reward %s changed the working directory from %s to %s; rlvr changed it back (the run "
                       "writes where it began). Use absolute paths, or os.chdir back, in the reward function",
                       name, cwd, now)
    os.chdir(cwd)


def _unique(name: str, taken: dict) -> str:
    candidate, k = name, 1
    while candidate in taken:
        k += 1
        candidate = f"{name}_{k}"
    return candidate


def _call_reward(call, name: str, n: int):
    """One reward function's values for the batch (``call()`` returns them), as (values, errors,
    nonfinite, failure text)."""
    try:
        raw = call()
        if hasattr(raw, "tolist"):  # numpy array or torch tensor
            raw = raw.tolist()
        raw = list(raw)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit in user code must not end the run silently
        logger.warning("reward %r raised; its values for this batch are None", name,
                       exc_info=not isinstance(exc, TimeoutError))
        return [None] * n, 1, 0, _exception_text(exc)
    if len(raw) != n or not all(v is None or isinstance(v, numbers.Real) for v in raw):
        bad = next((v for v in raw if v is not None and not isinstance(v, numbers.Real)), None)
        logger.warning("reward %r returned %d values for %d completions (first non-number: %r); "
                       "its values for this batch are None", name, len(raw), n, bad)
        problem = (f"returned {len(raw)} values for {n} completions" if len(raw) != n
                   else f"returned a {type(bad).__name__} ({str(bad)[:80]!r}), not a number or None")
        return [None] * n, 1, 0, problem
    values = [_finite_float(v) for v in raw]
    nonfinite = sum(v is not None for v in raw) - sum(v is not None for v in values)
    return values, 0, nonfinite, None


def _call_bounded(call, timeout_s: float | None):
    """``call()`` in a daemon thread, waiting at most ``timeout_s`` (None: in this thread, no limit).

    Its exception (also SystemExit) is re-raised here; a call still running at the deadline raises
    TimeoutError and is abandoned.
    """
    if timeout_s is None:
        return call()
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001  (handed to the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=run, name="rlvr-reward", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"did not return within reward_timeout={timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _exception_text(exc: BaseException) -> str:
    """``Type: message`` on one line, cut to 300 characters (the message may quote model text)."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _finite_float(value) -> float | None:
    """``float(value)``, or None for None, NaN, ±inf, a number beyond ±MAX_ABS_REWARD (``1e308``
    would overflow the batch's sums and means) and an int too large for a float (10**400)."""
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_ABS_REWARD else None


def is_async_callable(fn: Callable) -> bool:
    """True when calling ``fn`` returns a coroutine: ``async def`` functions, partials of them, and
    objects whose ``__call__`` is ``async def`` (TRL's ``is_async_callable``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _event_loop() -> asyncio.AbstractEventLoop:
    """The process's reward event loop, started on first use in a daemon thread."""
    return daemon_event_loop("rlvr-async-rewards")


def submit(fn: Callable, kwargs: dict, timeout_s: float | None) -> concurrent.futures.Future:
    """Start ``await fn(**kwargs)`` on the reward loop; ``.result()`` gives its value or raises its error."""

    async def call():
        try:  # fn(**kwargs) is evaluated in here, so a wrong signature's TypeError reaches the caller too
            return await asyncio.wait_for(fn(**kwargs), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"did not return within reward_timeout={timeout_s:g} s") from None

    return asyncio.run_coroutine_threadsafe(call(), _event_loop())
