"""Reward functions by name: the callable a config string means.

``resolve_reward`` turns a config string into a callable: a reward name (below),
``package.module:function``, ``package.module.function`` (``trl.rewards.accuracy_reward``),
``path/to/file.py:function``, or any of these after ``verl:`` for a verl ``compute_score``
(wrapped by ``VerlScore``, called once per response; a function whose signature takes
``solution_str`` and ``ground_truth`` and no ``completions`` is wrapped without the prefix).
A callable (the Python API) is taken as it is, with the same verl detection.

Reward names, by the config's dialect (``names``): ``accuracy`` and ``format`` are rlvr's built-ins
(``BUILTIN_REWARDS``: the verifier's accuracy, the boxed format) under ``names="rlvr"`` and open-r1's
under ``names="trl"`` (a TRL/open-r1 recipe's ``[accuracy, format, tag_count]`` means open-r1's);
``rlvr:accuracy``/``rlvr:format`` and ``open-r1:<name>`` (or ``open_r1:<name>``) say which in both; a
built-in whose name open-r1 lacks is refused bare under ``names="trl"`` (the message gives its ``rlvr:`` name).
In both dialects, open-r1's other names (``rlvr.rewards.open_r1``: ``tag_count``, ``cosine``, ...)
and the four of TRL's ``trl/scripts/grpo.py`` (``TRL_SCRIPT_REWARDS``, from ``trl.rewards``) need
no prefix. A dotted module is looked for in the working directory too, as TRL's script does.
The code rewards (``CODE_REWARDS``: open-r1's ``code``, ``binary_code``, ``code_format``, rlvr's
``code_check`` and ``verl_code``) run programs in rlvr's sandbox; ``bind_code_settings`` builds them
with the run's ``code_sandbox``/``code_extraction`` (docs/code_rewards.md).
How the functions are called and their values combined per completion is ``combine.py``'s.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable

from rlvr.core.user_code import load_user_function, split_function_spec
from rlvr.dependencies import MissingDependency
from rlvr.rewards.code_rewards import CodeCheckReward, CodeFormatReward, CodeReward, CodeSettings
from rlvr.rewards.extract import DEFAULT_EXTRACTION
from rlvr.rewards.math_rewards import MathAccuracy, format_reward
from rlvr.rewards.open_r1 import OPEN_R1_CODE_REWARDS, OPEN_R1_GRADER_REWARDS, OPEN_R1_REWARDS, open_r1_reward
from rlvr.rewards.reward_function import RewardFunction
from rlvr.rewards.sandbox import shared_pool
from rlvr.rewards.verl_code import VerlCodeReward
from rlvr.rewards.verl_score import VerlScore, is_verl_compute_score

logger = logging.getLogger(__name__)

RewardFn = RewardFunction  # the contract (rlvr.rewards.reward_function)
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




def _sandboxed(build: Callable[[CodeSettings], RewardFn]) -> Callable[[CodeSettings], RewardFn]:
    """``build``, after the sandbox pool has started: a machine that cannot isolate stops at set-up."""
    def start_then_build(settings: CodeSettings) -> RewardFn:
        shared_pool(settings.sandbox)
        return build(settings)
    return start_then_build


# name -> factory(code settings); open-r1's three take open-r1's names, in both dialects
CODE_REWARDS: dict[str, Callable[[CodeSettings], RewardFn]] = {
    "code": _sandboxed(lambda s: CodeReward(s.sandbox, s.extraction, binary=False)),
    "binary_code": _sandboxed(lambda s: CodeReward(s.sandbox, s.extraction, binary=True)),
    "code_format": lambda s: CodeFormatReward(),
    "code_check": _sandboxed(lambda s: CodeCheckReward(s.sandbox, s.extraction)),
    "verl_code": _sandboxed(lambda s: VerlCodeReward(s.sandbox)),
}


def _code_name(spec) -> str | None:
    """The code reward a spec names (``code``, ``open-r1:code``, ``verl_code``, ...), or None."""
    if not isinstance(spec, str):
        return None
    name = spec.strip()
    for prefix in OPEN_R1_PREFIXES:
        if name.startswith(prefix) and name[len(prefix):].strip() in OPEN_R1_CODE_REWARDS:
            name = name[len(prefix):].strip()
    return name if name in CODE_REWARDS else None


def is_code_reward(spec) -> bool:
    """Whether ``spec`` names a code reward (they read tests from the rows, no gold answer)."""
    return _code_name(spec) is not None


def bind_code_settings(spec, settings: CodeSettings):
    """The code reward ``spec`` names (``code``, ``open-r1:code``, ...) built with ``settings``; other specs as
    they are (``resolve_reward`` builds code rewards with the default settings)."""
    name = _code_name(spec)
    return spec if name is None else CODE_REWARDS[name](settings)


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
        ValueError: unknown name, open-r1's ioi_code/cf_code, a TRL name without trl installed, missing
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
            name = spec[len(prefix):].strip()
            return CODE_REWARDS[name](CodeSettings()) if name in OPEN_R1_CODE_REWARDS else open_r1_reward(name)
    if spec in BUILTIN_REWARDS:
        if names == "rlvr":
            return BUILTIN_REWARDS[spec](pool, answer_extraction)
        if spec not in OPEN_R1_REWARDS:
            raise ValueError(f"reward {spec!r} is an rlvr built-in, not an open-r1 reward; under preset=trl a bare "
                             f"name means open-r1's or TRL's: write {RLVR_PREFIX}{spec}")
        return open_r1_reward(spec)
    if spec in CODE_REWARDS:
        return CODE_REWARDS[spec](CodeSettings())
    if spec in OPEN_R1_REWARDS or spec in OPEN_R1_GRADER_REWARDS:
        return open_r1_reward(spec)
    if spec in TRL_SCRIPT_REWARDS:
        return _trl_script_reward(spec)
    return None


def _trl_script_reward(name: str) -> RewardFn:
    """The reward TRL's ``trl/scripts/grpo.py`` registers as ``name``, from ``trl.rewards``."""
    try:
        trl_rewards = importlib.import_module("trl.rewards")
    except ImportError as exc:
        raise MissingDependency(f"reward {name!r} is TRL's trl.rewards.{name}, but trl is not "
                         f"installed ({exc}); install it (pip install trl) or choose another reward") from exc
    return TRL_SCRIPT_REWARDS[name](trl_rewards)


def valid_reward_names(names: str) -> str:
    """The reward names of dialect ``names``, by owner, read from the registries (error messages, ``--help``)."""
    shared = [n for n in BUILTIN_REWARDS if n in OPEN_R1_REWARDS]  # a bare one means rlvr's or open-r1's by dialect
    other_open_r1 = ", ".join(n for n in OPEN_R1_REWARDS if n not in BUILTIN_REWARDS)
    if names == "rlvr":
        owned = (f"{', '.join(BUILTIN_REWARDS)} (rlvr's; open-r1's are "
                 f"{', '.join(OPEN_R1_PREFIXES[0] + n for n in shared)}), {other_open_r1} (open-r1's)")
    else:
        owned = (f"{', '.join(shared)}, {other_open_r1} (open-r1's; rlvr's are "
                 f"{', '.join(RLVR_PREFIX + n for n in BUILTIN_REWARDS)})")
    return f"{owned}, {', '.join(TRL_SCRIPT_REWARDS)} (TRL's), {', '.join(CODE_REWARDS)} (code, in the sandbox)"


def reward_funcs_help() -> str:
    """``reward_funcs``' ``--help``: the names of both dialects and the custom forms, from the registries."""
    shared = [n for n in BUILTIN_REWARDS if n in OPEN_R1_REWARDS]
    return (f"reward functions: {valid_reward_names('rlvr')}; under preset=trl a bare {' or '.join(shared)} is "
            f"open-r1's and {', '.join(RLVR_PREFIX + n for n in BUILTIN_REWARDS)} rlvr's; or {_SPEC_FORMS} (from "
            "Python also callables)")


def _custom(spec: str, names: str = "rlvr"):
    """The callable a custom spec names: ``module:attr``, ``file.py:attr`` or ``package.module.attr``."""
    if split_function_spec(spec) is None:
        raise ValueError(f"unknown reward {spec!r}; valid names ({names}): {valid_reward_names(names)}; or "
                         f"{_SPEC_FORMS}")
    fn = load_user_function(spec, what="reward", prefix="rlvr_user_reward")
    if not callable(fn):
        raise TypeError(f"{spec!r} is a {type(fn).__name__}, not a callable reward function")
    return fn
















