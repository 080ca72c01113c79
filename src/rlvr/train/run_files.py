"""The run directory's text files: config.yaml, metrics.jsonl, samples.jsonl.

metrics.jsonl and samples.jsonl hold one JSON object per line, each with a ``step``. On resume
from a checkpoint at step k, lines of steps > k are dropped (those steps are re-run), so the files
of a resumed run equal those of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_config(path: Path, config_dict: dict[str, Any]) -> None:
    write_text_atomic(path, yaml.safe_dump(config_dict, sort_keys=False))


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by None (JSON has no NaN) and tensors/numbers by floats."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlLog:
    """Append-only JSONL file, one object per line, flushed after each write."""

    def __init__(self, path: Path):
        self.path = path

    def truncate_after(self, step: int) -> None:
        """Keep only the records with ``step`` <= ``step``."""
        if not self.path.exists():
            return
        kept = [
            line
            for line in self.path.read_text(encoding="utf-8").splitlines()
            if line.strip() and _step_of(line) <= step
        ]
        write_text_atomic(self.path, "".join(f"{line}\n" for line in kept))

    def reset(self) -> None:
        write_text_atomic(self.path, "")

    def write(self, records: list[dict[str, Any]]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(json_safe(record), ensure_ascii=False) + "\n" for record in records)
            fh.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line).get("step", -1))
    except (ValueError, AttributeError):
        return 1 << 62  # an unreadable (half-written) line is dropped with the later steps
