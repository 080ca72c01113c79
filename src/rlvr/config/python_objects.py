"""What the Python API may give ``build_config`` that is no config value: reward and tool callables, a researcher's own
algorithm parts (an advantage estimator, a policy loss, a loss aggregation), in-memory data, a loaded model and
its tokenizer.

    build_config({"reward_funcs": [my_reward, "format"], "advantage_estimator": my_estimator,
                  "data": rows_or_dataset, "model": model, "processing_class": tokenizer, ...})

The config keeps only text, so config.yaml is still written and compared on resume: a callable
is recorded by its qualified name (``package.module.function`` when that name imports back to the
same object, so the file can be reused from the command line; ``python:<module>.<qualname>``
otherwise, e.g. a lambda or a function defined in a test), in-memory data as
``python:<type>[<N> rows, <fingerprint>]``, and a loaded model as ``python:<class>[<name_or_path>]``. The objects themselves ride along in
:class:`PythonObjects` (``ExperimentConfig.python``), which the trainer reads. A run resumed
from Python must pass the same objects again; ``data=python:...`` from the command line is refused.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike
from typing import Any

PYTHON_PREFIX = "python:"
# the options a callable may stand for (its family's signature: rlvr.train.algorithm_parts)
ALGORITHM_PART_OPTIONS = ("advantage_estimator", "policy_loss", "loss_type")


@dataclass(frozen=True)
class PythonObjects:
    """Reward callables by the label the config holds, and the rows given as ``data`` (None: ``data`` names them)."""

    reward_funcs: tuple[tuple[str, Callable], ...] = ()
    # advantage_estimator / policy_loss / loss_type given as callables, by the label the config holds
    # (rlvr.train.algorithm_parts loads and checks them at start-up)
    algorithm_parts: tuple[tuple[str, Callable], ...] = ()
    data: Any = None  # a list of row dicts or a datasets.Dataset
    model: Any = None  # a loaded transformers causal LM (None: ``model`` names one to load)
    tokenizer: Any = None  # its tokenizer (``processing_class``; None: loaded from the model's name_or_path)
    tools: tuple[tuple[str, Callable], ...] = ()  # ``tools`` given as callables, by the label the config holds
    environments: tuple[tuple[str, Callable], ...] = ()  # ``environment_factory`` callables, by label

    def environment(self, spec: str):
        """The factory an ``environment_factory`` entry's spec stands for, or the spec itself (a name to load)."""
        return dict(self.environments).get(spec, spec)

    def tool(self, spec: str):
        """The callable a ``tools`` entry stands for, or the spec itself (a name to load)."""
        return dict(self.tools).get(spec, spec)

    def reward(self, spec: str):
        """The callable a ``reward_funcs`` entry stands for, or the spec itself (a name to resolve)."""
        return dict(self.reward_funcs).get(spec, spec)


def split_python_objects(overrides: dict[str, Any]) -> tuple[dict[str, Any], PythonObjects]:
    """``overrides`` with callables and in-memory data replaced by their labels, and the objects."""
    overrides = dict(overrides)
    rewards = _labelled(overrides, "reward_funcs")
    tools = _labelled(overrides, "tools")
    environments = []
    given = overrides.get("environment_factory")
    if callable(given) or isinstance(given, dict):  # one factory, or {name: factory}: name=label entries
        labels = []
        for name, factory in (given.items() if isinstance(given, dict) else [(None, given)]):
            if callable(factory):
                label = _unique(callable_label(factory), {taken for taken, _ in environments})
                environments.append((label, factory))
                factory = label
            labels.append(factory if name is None else f"{name}={factory}")
        overrides["environment_factory"] = labels
    parts = []
    for option in ALGORITHM_PART_OPTIONS:
        fn = overrides.get(option)
        if callable(fn) and not isinstance(fn, str):
            overrides[option] = callable_label(fn)
            parts.append((overrides[option], fn))
    data = overrides.get("data")
    if data is not None and not isinstance(data, str):
        overrides["data"] = data_label(data)
    else:
        data = None
    model, tokenizer = overrides.get("model"), overrides.pop("processing_class", None)
    if model is not None and not isinstance(model, (str, PathLike)):
        if not callable(getattr(model, "generate", None)) or not hasattr(model, "config"):
            raise TypeError(f"model must be a name, a folder or a loaded transformers causal LM, got a "
                            f"{type(model).__name__}")
        overrides["model"] = f"{PYTHON_PREFIX}{type(model).__name__}[{getattr(model, 'name_or_path', '') or '?'}]"
    else:
        model = None
        if model is None and tokenizer is not None and overrides.get("model") is None:
            raise ValueError("processing_class without a model: give model= too")
    return overrides, PythonObjects(tuple(rewards), tuple(parts), data, model, tokenizer, tuple(tools),
                                    tuple(environments))


def _labelled(overrides: dict[str, Any], option: str) -> list[tuple[str, Callable]]:
    """The callables among ``overrides[option]`` (one, or a list mixing them with names), replaced there by their
    labels: (label, callable) pairs."""
    given = overrides.get(option)
    if callable(given) and not isinstance(given, str):
        given = [given]
    found: list[tuple[str, Callable]] = []
    if isinstance(given, (list, tuple)) and any(callable(fn) and not isinstance(fn, str) for fn in given):
        labels = []
        for fn in given:
            if callable(fn) and not isinstance(fn, str):
                label = _unique(callable_label(fn), {taken for taken, _ in found})
                found.append((label, fn))
                fn = label
            labels.append(fn)
        overrides[option] = labels
    return found


def callable_label(fn: Callable) -> str:
    """``module.qualname`` when importing it gives ``fn`` back, else ``python:module.qualname``."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    name = f"{module}.{qualname}"
    if module != "__main__" and "<" not in qualname and _imports_back(module, qualname, fn):
        return name
    return f"{PYTHON_PREFIX}{name}"


def _imports_back(module: str, qualname: str, fn: Callable) -> bool:
    """``module.qualname`` is ``fn`` (looked up in the loaded modules: nothing is imported here)."""
    target = sys.modules.get(module)
    if target is None:
        return False
    try:
        for part in qualname.split("."):
            target = getattr(target, part)
    except Exception:  # noqa: BLE001  (any failure means: not importable by that name)
        return False
    return target is fn


def _unique(label: str, taken: set[str]) -> str:
    candidate, k = label, 1
    while candidate in taken:
        k += 1
        candidate = f"{label}#{k}"
    return candidate


def data_label(data: Any) -> str:
    """``python:list[64 rows, 1a2b3c4d]``: the rows' count and fingerprint (a Dataset's own, else a CRC of the JSON)."""
    if isinstance(data, (list, tuple)):
        if not all(isinstance(row, dict) for row in data):
            bad = next(row for row in data if not isinstance(row, dict))
            raise TypeError(f"data from Python must be a list of row dicts (or a datasets.Dataset); found a "
                            f"{type(bad).__name__} ({str(bad)[:80]!r})")
        text = json.dumps(list(data), sort_keys=True, default=str)
        return f"{PYTHON_PREFIX}list[{len(data)} rows, {zlib.crc32(text.encode()):08x}]"
    is_mapping = hasattr(data, "keys")  # a dict, or a datasets.DatasetDict (which also has column_names)
    if not is_mapping and hasattr(data, "column_names") and hasattr(data, "__len__"):  # datasets.Dataset
        fingerprint = getattr(data, "_fingerprint", None) or "no fingerprint"
        return f"{PYTHON_PREFIX}{type(data).__name__}[{len(data)} rows, {fingerprint}]"
    hint = " (a DatasetDict: pick a split, e.g. dataset['train'])" if is_mapping else ""
    raise TypeError(f"data must be a dataset spec (text), a list of row dicts or a datasets.Dataset, "
                    f"got a {type(data).__name__}{hint}")
