"""Helpers to declare config fields (default + help) and to fail with the fix in the message."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def _f(default: Any, help: str) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _fail(name: str, value: Any, fix: str) -> None:
    raise ValueError(f"{name}={value!r}: {fix}")
