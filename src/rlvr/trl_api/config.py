"""``rlvr.GRPOConfig``: TRL's ``GRPOConfig`` fields and defaults (rlvr.trl_api.fields), and what a config of
either class asks of rlvr.

It is a plain dataclass: no ``__post_init__`` resolves anything (TRL's resolves ``bf16``, the
generation batch, ``report_to``...); rlvr resolves the same keys as TRL does when it builds its
config with ``preset: trl``. A ``trl.GRPOConfig`` instance is read the same way, through its
``to_dict()``.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from rlvr.trl_api.fields import FIELDS, TRL_VERSION

DEFAULTS: dict[str, Any] = dict(FIELDS)


def _field(default: Any) -> dataclasses.Field:
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d))
    return dataclasses.field(default=default)


def _to_dict(self) -> dict[str, Any]:
    """Every field and its value (as ``TrainingArguments.to_dict`` gives them)."""
    return {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}


GRPOConfig = dataclasses.make_dataclass(
    "GRPOConfig", [(name, Any, _field(default)) for name, default in FIELDS],
    namespace={"to_dict": _to_dict, "__module__": __name__,
               "__doc__": f"TRL {TRL_VERSION}'s GRPOConfig fields and defaults, for rlvr.GRPOTrainer "
                          "(docs/from_trl.md lists what rlvr does with each)."})


def config_overrides(args) -> dict[str, Any]:
    """The keys of ``args`` (an ``rlvr.GRPOConfig``, a ``trl.GRPOConfig``, or None) whose value is not TRL's
    default: what the config asks beyond TRL's defaults, which ``preset: trl`` supplies."""
    if args is None:
        return {}
    to_dict = getattr(args, "to_dict", None)
    if not callable(to_dict) or not dataclasses.is_dataclass(args):
        raise TypeError(f"args must be an rlvr.GRPOConfig or a trl.GRPOConfig, got a {type(args).__name__}; "
                        "build one with GRPOConfig(output_dir=..., learning_rate=..., ...)")
    values = to_dict()
    return {key: value for key, value in values.items() if key not in DEFAULTS or value != DEFAULTS[key]}
