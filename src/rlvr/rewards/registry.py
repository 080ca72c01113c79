"""Reward functions by name, and their weighted combination per completion.

``resolve_reward`` turns a config string into a callable: a reward name (below),
``package.module:function``, ``package.module.function`` (``trl.rewards.accuracy_reward``),
``path/to/file.py:function``, or any of these after ``verl:`` for a verl ``compute_score``
(wrapped by ``VerlScore``, called once per response; a function whose signature takes
``solution_str`` and ``ground_truth`` and no ``completions`` is wrapped without the prefix).
A callable (the Python API) is taken as it is, with the same verl detection.

Reward names, by the config's dialect (``names``): ``accuracy`` and ``format`` are rlvr's built-ins
(``BUILTIN_REWARDS``: the verifier's accuracy, the boxed format) under ``names="rlvr"`` and open-r1's
under ``names="trl"`` (a TRL/open-r1 recipe's ``[accuracy, format, tag_count]`` means open-r1's);
``rlvr:accuracy``/``rlvr:format`` and ``open-r1:<name>`` (or ``open_r1:<name>``) say which in both.
In both dialects, open-r1's other names (``rlvr.rewards.open_r1``: ``tag_count``, ``cosine``, ...)
and the four of TRL's ``trl/scripts/grpo.py`` (``TRL_SCRIPT_REWARDS``, from ``trl.rewards``) need
no prefix. A dotted module is looked for in the working directory too, as TRL's script does.
``combine_rewards`` calls each function once per batch (``async def`` ones concurrently on one
event loop, ``rlvr.rewards.async_calls``) and sums the weighted values, TRL-style:

    total_i = Σ_f w_f · r_f,i   over the f with r_f,i not None   (TRL: nansum)

Convention: a function that raises, returns the wrong length or returns non-numbers contributes
None for the whole batch (counted in ``<name>/errors``, the exception handed back through
``failures``; so does a call past ``timeout_s`` and a ``SystemExit`` raised by user code); a NaN,
±inf, float-overflowing (``10**400``) or absurd (beyond ±1e12) value becomes None
(``<name>/nonfinite``); a completion where every function gave None totals 0.0 and is counted in
``all_none`` (the trainer leaves such an unscorable completion out of its group's statistics and
gives it advantage 0, see ``rlvr.train.advantages``).
User reward code is model-facing, so a failure never raises here; whether the run goes on is the
caller's decision (``rlvr.train.rewarding``: a function that fails at every call stops the run).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
import numbers
import os
import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from rlvr.rewards import async_calls
from rlvr.rewards.extract import DEFAULT_EXTRACTION
from rlvr.rewards.math_rewards import MathAccuracy, format_reward
from rlvr.rewards.open_r1 import OPEN_R1_CODE_REWARDS, OPEN_R1_REWARDS, open_r1_reward
from rlvr.rewards.reward_function import RewardFunction
from rlvr.rewards.verl_score import VerlScore, is_verl_compute_score

logger = logging.getLogger(__name__)

RewardFn = RewardFunction  # the contract (rlvr.rewards.reward_function)
MAX_ABS_REWARD = 1e12  # larger values are treated like inf: counted in <name>/nonfinite, dropped
MAX_ABS_WEIGHT = 1e6  # so that a weighted sum of rewards can never overflow
VERL_PREFIX = "verl:"  # verl:path/to/file.py:compute_score, verl:package.module.compute_score
RLVR_PREFIX = "rlvr:"  # rlvr:accuracy, rlvr:format: rlvr's built-ins in either dialect
OPEN_R1_PREFIXES = ("open-r1:", "open_r1:")  # open-r1:accuracy: open-r1's reward in either dialect
NAME_DIALECTS = ("rlvr", "trl")  # what a bare `accuracy`/`format` means: rlvr's built-in or open-r1's
_SPEC_FORMS = ("a custom 'package.module:function', 'package.module.function' or 'path/to/file.py:function' "
               "(a verl compute_score: the same after 'verl:')")

# name -> factory(pool, answer_extraction)
BUILTIN_REWARDS: dict[str, Callable[[object, str], RewardFn]] = {
    "accuracy": lambda pool, answer_extraction: MathAccuracy(_require_pool(pool), answer_extraction),
    "format": lambda pool, answer_extraction: format_reward,
}


# TRL 1.16 trl/scripts/grpo.py's registry: name -> its reward, built from the trl.rewards module
TRL_SCRIPT_REWARDS: dict[str, Callable[[object], RewardFn]] = {
    "accuracy_reward": lambda trl_rewards: trl_rewards.accuracy_reward,
    "reasoning_accuracy_reward": lambda trl_rewards: trl_rewards.reasoning_accuracy_reward,
    "think_format_reward": lambda trl_rewards: trl_rewards.think_format_reward,
    # the lengths TRL's script builds it with
    "get_soft_overlong_punishment": lambda trl_rewards: trl_rewards.get_soft_overlong_punishment(
        max_completion_len=1280, soft_punish_cache=256),
}


def _require_pool(pool):
    if pool is None:
        raise ValueError("the `accuracy` reward needs a VerifierPool; "
                         "pass resolve_reward('accuracy', VerifierPool())")
    return pool


def resolve_reward(spec, pool=None, *, answer_extraction: str = DEFAULT_EXTRACTION, names: str = "rlvr") -> RewardFn:
    """The reward callable named by ``spec``.

    Args:
        spec: a reward name (module docstring) | ``rlvr:accuracy`` | ``rlvr:format`` |
            ``open-r1:<name>`` | ``package.module:function`` | ``package.module.function`` |
            ``path/to/file.py:function`` | ``verl:`` + one of the custom forms | a callable.
        pool: the ``VerifierPool`` handed to rlvr's built-ins that verify (``accuracy``).
        answer_extraction: ``boxed`` | ``flexible``, for rlvr's built-ins that extract answers; other
            functions are returned as they are (a verl ``compute_score`` wrapped in ``VerlScore``).
        names: the config's dialect, ``rlvr`` | ``trl``: whether a bare ``accuracy``/``format`` is
            rlvr's built-in or open-r1's.

    Raises:
        ValueError: unknown name, an open-r1 code reward, a TRL name without trl installed, missing
            module/file/attribute (the message lists the valid names and forms).
        TypeError: the named object is not callable.
    """
    if names not in NAME_DIALECTS:
        raise ValueError(f"names must be one of {NAME_DIALECTS}, got {names!r}")
    if callable(spec) and not isinstance(spec, str):
        return VerlScore(spec) if is_verl_compute_score(spec) else spec
    if not isinstance(spec, str) or not spec.strip():
        raise TypeError(f"a reward spec must be a non-empty string or a callable, got {spec!r}")
    spec = spec.strip()
    named = _named_reward(spec, pool, answer_extraction, names)
    if named is not None:
        return named
    if spec.startswith("python:"):  # rlvr.config.python_objects' label of a callable given from Python
        raise ValueError(f"reward {spec!r} was a Python callable given to build_config; it cannot be imported by "
                         "that name: pass the callable again from Python, or give a module or file spec")
    if spec.startswith(VERL_PREFIX):
        fn = _custom(spec[len(VERL_PREFIX):].strip(), names)
        return fn if isinstance(fn, VerlScore) else VerlScore(fn)
    fn = _custom(spec, names)
    return VerlScore(fn) if is_verl_compute_score(fn) else fn


def _named_reward(spec: str, pool, answer_extraction: str, names: str):
    """The reward a (prefixed) name stands for in dialect ``names``; None when ``spec`` is not a name."""
    if spec.startswith(RLVR_PREFIX):
        name = spec[len(RLVR_PREFIX):].strip()
        if name not in BUILTIN_REWARDS:
            raise ValueError(f"unknown rlvr reward {spec!r}; valid: "
                             f"{', '.join(RLVR_PREFIX + n for n in BUILTIN_REWARDS)}")
        return BUILTIN_REWARDS[name](pool, answer_extraction)
    for prefix in OPEN_R1_PREFIXES:
        if spec.startswith(prefix):
            return open_r1_reward(spec[len(prefix):].strip())
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec](pool, answer_extraction) if names == "rlvr" else open_r1_reward(spec)
    if spec in OPEN_R1_REWARDS or spec in OPEN_R1_CODE_REWARDS:
        return open_r1_reward(spec)
    if spec in TRL_SCRIPT_REWARDS:
        return _trl_script_reward(spec)
    return None


def _trl_script_reward(name: str) -> RewardFn:
    """The reward TRL's ``trl/scripts/grpo.py`` registers as ``name``, from ``trl.rewards``."""
    try:
        trl_rewards = importlib.import_module("trl.rewards")
    except ImportError as exc:
        raise ValueError(f"reward {name!r} is TRL's trl.rewards.{name}, but trl is not "
                         f"installed ({exc}); install it (pip install trl) or choose another reward") from exc
    return TRL_SCRIPT_REWARDS[name](trl_rewards)


def _valid_names(names: str) -> str:
    """The reward names of dialect ``names``, by owner, for error messages."""
    other_open_r1 = ", ".join(n for n in OPEN_R1_REWARDS if n not in BUILTIN_REWARDS)
    builtins = ", ".join(BUILTIN_REWARDS)
    if names == "rlvr":
        owned = (f"{builtins} (rlvr's; open-r1's are open-r1:accuracy, open-r1:format), "
                 f"{other_open_r1} (open-r1's)")
    else:
        owned = f"{builtins}, {other_open_r1} (open-r1's; rlvr's are rlvr:accuracy, rlvr:format)"
    return f"{owned}, {', '.join(TRL_SCRIPT_REWARDS)} (TRL's)"


def _custom(spec: str, names: str = "rlvr"):
    """The callable a custom spec names: ``module:attr``, ``file.py:attr`` or ``package.module.attr``."""
    if ":" in spec:
        target, name = spec.rsplit(":", 1)
    elif "." in spec.strip(".") and not spec.endswith(".py"):
        target, name = spec.rsplit(".", 1)
    else:
        raise ValueError(f"unknown reward {spec!r}; valid names ({names}): {_valid_names(names)}; or {_SPEC_FORMS}")
    module = _load_file(target) if target.endswith(".py") else _load_module(target)
    fn = getattr(module, name, None)
    if fn is None:
        raise ValueError(f"{target!r} has no attribute {name!r}; check the function name in "
                         f"the reward spec {spec!r}")
    if not callable(fn):
        raise TypeError(f"{spec!r} is a {type(fn).__name__}, not a callable reward function")
    return fn


def _load_module(module_name: str):
    _search_working_directory()
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name and exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise ValueError(f"reward module {module_name!r} imports {exc.name!r}, which is not installed "
                             f"({exc}); install it in this environment, or remove the import") from exc
        raise ValueError(f"cannot import reward module {module_name!r} ({exc}); install it or "
                         "put it on PYTHONPATH or in the working directory, or use 'path/to/file.py:function'") from exc


def _search_working_directory() -> None:
    """Put the working directory first on ``sys.path`` unless it is on it, as TRL's grpo script does.

    So ``my_rewards.my_fn`` finds ``my_rewards.py`` in the working directory also under the ``rlvr``
    console script, whose ``sys.path`` lacks it (``python -m``/``-c`` have it, as ``""`` or the path).
    """
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was deleted: nothing there to find
        return
    if not any(isinstance(entry, str) and os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def _load_file(path_str: str):
    path = Path(path_str).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"reward file {path_str!r} not found (resolved to {path}); give a path "
                         "relative to the working directory or an absolute one")
    module_name = f"rlvr_user_reward_{path.stem}_{zlib.crc32(str(path).encode()):08x}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    file_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[module_name] = module  # so pickling and dataclasses inside the file work
    try:
        file_spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[module_name]
        if isinstance(exc, Exception):
            raise _import_failure(path_str, path, exc) from exc
        raise
    return module


def _import_failure(path_str: str, path: Path, exc: Exception) -> ValueError:
    """What went wrong importing a reward file, in one line: the file and line, the cause and the fix."""
    import traceback

    if isinstance(exc, SyntaxError):
        return ValueError(f"reward file {path_str!r} has a syntax error at line {exc.lineno}: {exc.msg}; fix the file")
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if Path(frame.filename) == path]
    where = f"{path_str}:{lines[-1]}" if lines else path_str
    message = " ".join(str(exc).split())[:200]
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return ValueError(f"reward file {where} imports {exc.name!r}, which is not installed ({message}); install "
                          "it in this environment (pip install ...), put it on PYTHONPATH, or remove the import")
    return ValueError(f"reward file {where} raised {type(exc).__name__} while being imported ({message}); "
                      "fix the file's module-level code")


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
    started = {name: async_calls.submit(fn, kwargs, timeout_s)
               for fn, name in zip(funcs, names) if async_calls.is_async_callable(fn)}
    per_func: dict[str, list[float | None]] = {}
    counts: dict[str, int] = {}
    for fn, name in zip(funcs, names):
        if name in started:
            call = started[name].result
        else:
            call = lambda fn=fn: _call_bounded(lambda: fn(**kwargs), timeout_s)
        values, errors, nonfinite, failure = _call_reward(call, name, n)
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
