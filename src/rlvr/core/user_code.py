"""A user's own Python named in an option (``path/to/file.py:fn``, ``module:fn``, ``package.module.fn``): imported
here, for the reward functions (rlvr.rewards.registry) and a researcher's own estimator, loss or aggregation
(rlvr.train.algorithm_parts) alike. Standard library only. Every failure is one line naming the file or module,
the cause and the fix; ``what`` names the option in it ("reward file", "policy_loss: file", ...).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
import zlib
from pathlib import Path


def split_function_spec(spec: str) -> tuple[str, str] | None:
    """(file or module, attribute) of ``path/to/file.py:fn``, ``module:fn`` or ``package.module.fn``; None for a
    value of none of these forms (a registered name has no ``:`` and no ``.``; ``my.py`` alone names no function)."""
    if ":" in spec:
        target, name = spec.rsplit(":", 1)
        return target, name
    if "." in spec.strip(".") and not spec.endswith(".py"):
        target, name = spec.rsplit(".", 1)
        return target, name
    return None


def load_user_function(spec: str, *, what: str, prefix: str):
    """The attribute a function spec names (:func:`split_function_spec`), its file or module imported; ``what``
    names the option in the errors ("reward", "policy_loss", ...), ``prefix`` the module of a file."""
    parts = split_function_spec(spec)
    if parts is None:
        raise ValueError(f"{what} {spec!r} is not path/to/file.py:function, module:function or package.module.function")
    target, name = parts
    module = (load_user_file(target, what=f"{what} file", prefix=prefix) if target.endswith(".py")
              else import_user_module(target, what=f"{what} module"))
    fn = getattr(module, name, None)
    if fn is None:
        raise ValueError(f"{what} {spec!r}: {target!r} has no attribute {name!r}; check the name")
    return fn


def search_working_directory() -> None:
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


def import_user_module(module_name: str, *, what: str):
    """``module_name`` imported (the working directory searched too); ``what``: e.g. "reward module"."""
    search_working_directory()
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name and exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise ValueError(f"{what} {module_name!r} imports {exc.name!r}, which is not installed ({exc}); install "
                             "it in this environment, or remove the import") from exc
        raise ValueError(f"cannot import {what} {module_name!r} ({exc}); install it or put it on PYTHONPATH or in "
                         "the working directory, or use 'path/to/file.py:function'") from exc


def load_user_file(path_str: str, *, what: str, prefix: str):
    """The module of the file ``path_str``, imported once per resolved path (as ``<prefix>_<stem>_<crc>``)."""
    path = Path(path_str).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"{what} {path_str!r} not found (resolved to {path}); give a path relative to the working "
                         "directory or an absolute one")
    module_name = f"{prefix}_{path.stem}_{zlib.crc32(str(path).encode()):08x}"
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
            raise _import_failure(path_str, path, exc, what) from exc
        raise
    return module


def _import_failure(path_str: str, path: Path, exc: Exception, what: str) -> ValueError:
    """What went wrong importing a user's file, in one line: the file and line, the cause and the fix."""
    if isinstance(exc, SyntaxError):
        return ValueError(f"{what} {path_str!r} has a syntax error at line {exc.lineno}: {exc.msg}; fix the file")
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if Path(frame.filename) == path]
    where = f"{path_str}:{lines[-1]}" if lines else path_str
    message = " ".join(str(exc).split())[:200]
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return ValueError(f"{what} {where} imports {exc.name!r}, which is not installed ({message}); install "
                          "it in this environment (pip install ...), put it on PYTHONPATH, or remove the import")
    return ValueError(f"{what} {where} raised {type(exc).__name__} while being imported ({message}); "
                      "fix the file's module-level code")
