"""A researcher's own algorithm parts, named in the config as a reward function is: no edit of rlvr.

    advantage_estimator=my_algos.py:rfpp_baseline   fn(inputs, settings) -> advantages [N]
    policy_loss=my_algos.py:my_loss                 fn(logprobs, old_logprobs, advantages, mask, settings)
                                                        -> (loss [N, T], clipped [N, T] bool)
    loss_type=my_algos.py:my_mean                   fn(per_token [N, T], mask [N, T], denominators) -> scalar

Each family has one signature, the built-ins' own (``rlvr.core.advantages``, ``rlvr.core.losses``). A spec is
``path/to/file.py:function``, ``module:function`` or ``package.module.function`` (a module in the working
directory is found); from the Python API the callable itself (``build_config({"policy_loss": fn})``, its label
in the config, the object in ``cfg.python.algorithm_parts``). The config only checks the spec's form (it must
not import torch); :func:`load_algorithm_parts`, called by ``compile_plan`` at start-up and by ``--dry-run``,
imports each, checks that it takes its family's arguments, and registers it in its family's registry under the
spec, so the step calls it as it calls a built-in (docs/extending.md) — wrapped, so that what it returns is checked
where it returns and its own exception is reported as its own (rlvr.train.algorithm_part_checks, which also
probes each part once on a synthetic batch). Every failure is an :class:`AlgorithmPartError` (a ValueError).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from rlvr.config.python_objects import PYTHON_PREFIX
from rlvr.core.advantages import register_advantage
from rlvr.core.losses import register_aggregation, register_policy_loss
from rlvr.core.names import is_function_spec
from rlvr.core.user_code import load_user_function
from rlvr.train.algorithm_part_checks import AlgorithmPartError, checked


@dataclass(frozen=True)
class Family:
    """One family of algorithm parts: its option, its signature, how to register one."""

    option: str
    signature: str  # as the error names what was expected
    arguments: int  # positional arguments it is called with
    register: Callable[[str], Callable]


FAMILIES = {
    "advantage_estimator": Family("advantage_estimator", "fn(inputs, settings) -> advantages [N]", 2,
                                  register_advantage),
    "policy_loss": Family("policy_loss", "fn(logprobs, old_logprobs, advantages, mask, settings) -> "
                          "(loss [N, T], clipped [N, T])", 5, register_policy_loss),
    "loss_type": Family("loss_type", "fn(per_token, mask, denominators) -> scalar loss", 3, register_aggregation),
}


def load_algorithm_parts(*, advantage_estimator: str, policy_loss: str, aggregation: str,
                         objects: dict[str, Callable]) -> dict[str, str]:
    """Load, check and register each of the three options that names a user's function (a no-op for the
    registered names); the user's parts, option -> spec. ``objects``: the Python API's callables by their label
    (``cfg.python.algorithm_parts``). ValueError in one line naming the option, the spec and the fix."""
    user_parts = {}
    for option, spec in (("advantage_estimator", advantage_estimator), ("policy_loss", policy_loss),
                         ("loss_type", aggregation)):
        if is_function_spec(spec):
            family = FAMILIES[option]
            fn = objects.get(spec) or load_function(spec, option)
            check_signature(fn, family, spec)
            family.register(spec)(checked(fn, option, spec, family.signature))
            user_parts[option] = spec
    return user_parts


def check_signature(fn: Callable, family: Family, spec: str) -> None:
    """AlgorithmPartError unless ``fn`` can be called with its family's positional arguments."""
    if not callable(fn):
        raise AlgorithmPartError(f"{family.option}={spec} is a {type(fn).__name__}, not a function; expected "
                        f"{family.signature}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(*range(family.arguments))
    except TypeError:
        raise AlgorithmPartError(f"{family.option}={spec} takes {getattr(fn, '__name__', 'fn')}{signature}, expected "
                        f"{family.signature} ({family.arguments} positional arguments)") from None


def load_function(spec: str, option: str) -> Callable:
    """The function ``spec`` names: ``file.py:fn``, ``module:fn`` or ``package.module.fn``."""
    if spec.startswith(PYTHON_PREFIX):
        raise ValueError(f"{option}={spec} names a Python object of another process (a lambda or a function of "
                         f"__main__): pass the callable itself to build_config again, or name it as "
                         "path/to/file.py:function")
    return load_user_function(spec, what=option, prefix="rlvr_user_algorithm")
