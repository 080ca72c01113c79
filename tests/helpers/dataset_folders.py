"""A small dataset folder as ``datasets.load_dataset`` reads it (train.jsonl + test.jsonl), for the data tests and
the source contract suite."""

from __future__ import annotations

import json
from pathlib import Path

TRAIN = [{"prompt": "train 1+1?", "answer": "2"}, {"prompt": "train 2+2?", "answer": "4"}]
TEST = [{"prompt": "test 3+3?", "answer": "6"}]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def math_folder(tmp_path: Path) -> Path:
    """``tmp_path/math`` with TRAIN in train.jsonl and TEST in test.jsonl."""
    folder = tmp_path / "math"
    write_jsonl(folder / "train.jsonl", TRAIN)
    write_jsonl(folder / "test.jsonl", TEST)
    return folder
