"""Optional packages: an option that needs one that is not installed stops at set-up with one line.

:class:`MissingDependency` is both an ImportError (what it is) and a ValueError (what the command line
reports in one line, exit 2, as every other bad option), so ``rlvr train rollout_engine=vllm`` without
vllm says what to install instead of a chained traceback.
"""

from __future__ import annotations

import importlib.util


class MissingDependency(ImportError, ValueError):
    """An option needs a package that cannot be imported; the message names the option and the install line."""


def require(module: str, message: str) -> None:
    """MissingDependency(``message``) unless ``module`` can be found (found, not imported: this is cheap)."""
    if importlib.util.find_spec(module) is None:
        raise MissingDependency(message)
