"""The resumable per-problem record of an evaluation: ``<out>.problems.jsonl``.

Line 1 is ``{"settings": {...}}`` — everything that changes a problem's result (model, n,
temperature, top_p, max_completion_length, seed, instruction, system_prompt, answer_extraction,
greedy, diversity). Every further line is one finished problem:

    {"dataset": SPEC, "id": ROW_ID, "n": 16, "correct": 5, "greedy_correct": true|false|null,
     "diversity": 0.41|null, "timeouts": 0}

Lines are flushed and fsynced as problems finish. On reopen, problems already recorded are skipped;
a half-written last line (a crash mid-write) is cut off; a file written with other settings is
refused, because mixing them would silently average two different experiments.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Self

PROBLEM_KEYS = ("dataset", "id", "n", "correct", "greedy_correct", "diversity", "timeouts")


def problems_path(out_path: str | os.PathLike) -> Path:
    """``<out_path>.problems.jsonl`` next to the summary JSON."""
    out = Path(out_path)
    return out.with_name(out.name + ".problems.jsonl")


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{key}: {old.get(key)!r} → {new.get(key)!r}" for key in keys if old.get(key) != new.get(key)]


def _parse(path: Path) -> tuple[dict | None, dict[tuple[str, str], dict], int]:
    """(settings, {(dataset, id): record}, byte length of the complete valid lines)."""
    data = path.read_bytes()
    settings, records, good_end, position = None, {}, 0, 0
    while position < len(data):
        newline = data.find(b"\n", position)
        end = len(data) if newline < 0 else newline + 1
        text = data[position:end].decode("utf-8", errors="replace").strip()
        try:
            obj = json.loads(text) if text else None
        except json.JSONDecodeError:
            if newline < 0:  # a half-written last line: drop it
                break
            line_number = data[:position].count(b"\n") + 1
            raise ValueError(
                f"{path}: line {line_number} is not valid JSON; the file is damaged — "
                "delete it to start this evaluation over"
            ) from None
        if newline < 0 and obj is not None:
            break  # complete JSON but no newline yet: the write was cut before "\n"; redo that problem
        if obj is not None:
            if settings is None:
                if not isinstance(obj, dict) or "settings" not in obj:
                    raise ValueError(f"{path}: first line is not a settings header; delete the file to start over")
                settings = obj["settings"]
            else:
                records[(obj["dataset"], obj["id"])] = obj
        good_end, position = end, end
    return settings, records, good_end


class ProblemsFile:
    """Append-only per-problem results with resume; use as a context manager."""

    def __init__(self, path: str | os.PathLike, settings: dict):
        self.path = Path(path)
        self.records: dict[tuple[str, str], dict] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            old_settings, self.records, good_end = _parse(self.path)
            if old_settings is not None and old_settings != settings:
                raise ValueError(
                    f"{self.path} holds results of an evaluation with other settings ("
                    + "; ".join(_differences(old_settings, settings))
                    + "); rerun with the same settings to resume, or delete that file (or choose another --out) "
                    "to start a new evaluation"
                )
            with self.path.open("r+b") as file:
                file.truncate(good_end)
            if old_settings is None:
                self.records = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        if self.path.stat().st_size == 0:
            self._write({"settings": settings})

    def done(self, dataset: str, problem_id: str) -> bool:
        return (dataset, problem_id) in self.records

    def add(self, record: dict) -> None:
        assert tuple(record) == PROBLEM_KEYS, f"record keys {tuple(record)} != {PROBLEM_KEYS}"
        self.records[(record["dataset"], record["id"])] = record
        self._write(record)

    def _write(self, obj: dict) -> None:
        self._file.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
