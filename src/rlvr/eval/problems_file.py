"""The resumable per-problem record of an evaluation: ``<out>.problems.jsonl``.

Line 1 is ``{"settings": {...}}`` — everything that changes a problem's result (model, dtype, n,
temperature, top_p, max_completion_length, seed, instruction, system_prompt, answer_extraction,
greedy, diversity; built by ``rlvr.eval.runner.result_settings``). Every further line is one
finished problem:

    {"dataset": SPEC, "id": ROW_ID, "problem": SHA256_PREFIX, "n": 16, "correct": 5,
     "greedy_correct": true|false|null, "diversity": 0.41|null, "timeouts": 0}

``problem`` fingerprints the row's prompt and gold answer, so a resume notices a dataset that
changed under the same spec. Lines are flushed and fsynced as problems finish (the file's folder
too, when the file is created). On reopen, problems already recorded are skipped; a half-written
last line (a kill mid-write) is cut off and that problem runs again; a file written with other
settings is refused, because mixing them would silently average two different experiments.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Self

PROBLEM_KEYS = ("dataset", "id", "problem", "n", "correct", "greedy_correct", "diversity", "timeouts")


def problems_path(out_path: str | os.PathLike) -> Path:
    """``<out_path>.problems.jsonl`` next to the summary JSON."""
    out = Path(out_path)
    return out.with_name(out.name + ".problems.jsonl")


def _differences(old: dict, new: dict) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{key}: {old.get(key)!r} → {new.get(key)!r}" for key in keys if old.get(key) != new.get(key)]


def _parse(path: Path, data: bytes | None = None) -> tuple[dict | None, dict[tuple[str, str], dict], int]:
    """(settings, {(dataset, id): record}, byte length of the complete valid lines) of ``data`` (default: the file)."""
    data = path.read_bytes() if data is None else data
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
            elif isinstance(obj, dict) and set(obj) == set(PROBLEM_KEYS):
                records[(obj["dataset"], obj["id"])] = obj
            else:
                line_number = data[:position].count(b"\n") + 1
                raise ValueError(f"{path}: line {line_number} is not a problem record (keys {PROBLEM_KEYS}); "
                                 "the file is damaged or from another tool — delete it to start this evaluation over")
        good_end, position = end, end
    return settings, records, good_end


def settings_mismatch(path: str | os.PathLike, settings: dict, *, undecided: tuple[str, ...] = ()) -> str | None:
    """Why ``path`` cannot be resumed with ``settings`` (each differing option, old → new), or None.

    ``undecided``: keys not known yet (a check before the model loads cannot know its dtype under
    ``auto`` or whether its tokenizer has a chat template); they are left out of the comparison.
    """
    path = Path(path)
    if not path.is_file():
        return None
    with path.open("rb") as file:
        first = file.readline()
    if not first.endswith(b"\n"):  # empty, or a header cut off mid-write: nothing to resume
        return None
    # The header alone (read before the records, so a file of an older format reports its settings).
    old_settings, _, _ = _parse(path, first)
    if old_settings is not None and undecided:
        old_settings = {key: value for key, value in old_settings.items() if key not in undecided}
        settings = {key: value for key, value in settings.items() if key not in undecided}
    if old_settings is None or old_settings == settings:
        return None
    return (f"{path} holds results of an evaluation with other settings ("
            + "; ".join(_differences(old_settings, settings))
            + "); mixing them would average two different experiments: rerun with the original values to "
            "resume, or choose another --out (or delete that file) to start a new evaluation")


def count_finished(path: str | os.PathLike) -> int:
    """How many problems ``path`` records (0 when it does not exist; a half-written last line does not count)."""
    path = Path(path)
    return len(_parse(path)[1]) if path.is_file() else 0


class ProblemsFile:
    """Append-only per-problem results with resume; use as a context manager."""

    def __init__(self, path: str | os.PathLike, settings: dict):
        self.path = Path(path)
        self.records: dict[tuple[str, str], dict] = {}
        if self.path.exists() and self.path.stat().st_size > 0:
            mismatch = settings_mismatch(self.path, settings)
            if mismatch:
                raise ValueError(mismatch)
            old_settings, self.records, good_end = _parse(self.path)
            with self.path.open("r+b") as file:
                file.truncate(good_end)
            if old_settings is None:
                self.records = {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._file = self.path.open("a", encoding="utf-8")
        if created:  # the new name must survive a power cut as well as its lines
            folder = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        if self.path.stat().st_size == 0:
            self._write({"settings": settings})

    def done(self, dataset: str, problem_id: str, problem: str) -> bool:
        """Whether that problem is recorded; ValueError if it was recorded with another ``problem`` fingerprint."""
        record = self.records.get((dataset, problem_id))
        if record is not None and record["problem"] != problem:
            raise ValueError(
                f"{self.path}: problem {problem_id!r} of dataset {dataset!r} has another prompt or answer than "
                "when it was recorded (the data changed under the same spec); restore the original data to "
                "resume, or choose another --out to evaluate the new data"
            )
        return record is not None

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
