"""Helpers to declare config fields (default + help) and to fail with the fix in the message."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import field
from typing import Any


def _f(default: Any, help: str | Callable[[], str]) -> Any:
    """A field with its default and its ``--help`` text; ``help`` may be a function of no arguments, called each time
    the help is shown (:func:`help_text`): a list of registered names read from the registry then, so a name
    registered later is listed too."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def help_text(f: dataclasses.Field) -> str:
    """A field's ``--help`` text (its help function called, see :func:`_f`)."""
    text = f.metadata.get("help", "")
    return text() if callable(text) else text


def _fail(name: str, value: Any, fix: str) -> None:
    raise ValueError(f"{name}={value!r}: {fix}")


def _check_finite(section: Any) -> None:
    """Refuse NaN and ±inf in every float (or list-of-float) field of a config section.

    One check for every number option: NaN passes every comparison (``nan <= 0`` is False), so a
    range check alone lets ``learning_rate=nan`` through, and ``inf`` passes ``> 0``.
    """
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            _fail(f.name, value, "use a finite number (nan and inf are refused; see `rlvr train --help`)")
