"""Optional packages: an option that needs one that is not installed stops at set-up with one line.

:class:`MissingDependency` is both an ImportError (what it is) and a ValueError (what the command line
reports in one line, exit 2, as every other bad option), so ``rlvr train rollout_engine=vllm`` without
vllm says what to install instead of a chained traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError, ValueError):
    """An option needs a package that cannot be imported; the message names the option and the install line."""


def import_optional(module: str, *, needed_by: str, install: str) -> ModuleType:
    """``import module``, or MissingDependency: "<needed_by> needs the <module> package ...; <install>"."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependency(f"{needed_by} needs the {module.split('.')[0]} package, which cannot be imported "
                                f"({error}); {install}") from error
