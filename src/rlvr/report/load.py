"""Read what a report draws: run directories (config.yaml, metrics.jsonl) and eval result files.

A run directory is what ``rlvr train`` / ``rlvr sft`` writes. metrics.jsonl holds one JSON object
per step; a metric is turned into a series of (step, value) points in step order, skipping steps
where it is null, missing or non-finite. Eval result files are the JSON that ``rlvr eval`` writes;
those inside a run's ``eval/`` folder belong to that run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Series:
    """One metric of one run: ``values[i]`` was logged at ``steps[i]``; steps increase."""

    steps: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class Run:
    """A run directory, read. ``series`` holds every metric with at least one finite value."""

    name: str
    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    series: dict[str, Series]
    notes: list[str] = field(default_factory=list)
    # a group of runs (report.groups): metric -> (steps, min, max) over its members, and their names
    bands: dict[str, tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)

    @property
    def algo(self) -> str:
        return str(self.config.get("algorithm", {}).get("algo", "?"))

    @property
    def num_steps(self) -> int:
        return max((int(r["step"]) for r in self.records), default=0)

    def get(self, key: str) -> Series | None:
        return self.series.get(key)

    def has(self, key: str) -> bool:
        return key in self.series


@dataclass
class EvalResult:
    """One eval result file. ``label`` names it in plots: the run it belongs to, or the file stem.

    ``datasets[spec]["pass@k"]`` maps int k → pass@k (the file's string keys converted).
    """

    label: str
    path: Path
    model: str
    settings: dict[str, Any]
    datasets: dict[str, dict[str, Any]]
    run_name: str | None = None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_metrics(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of metrics.jsonl in step order (a repeated step keeps its last record).

    A malformed *last* line is skipped with a note (a run killed mid-write); any other malformed
    line is an error naming the line.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    by_step: dict[int, dict[str, Any]] = {}
    notes = []
    for position, (number, line) in enumerate(numbered):
        try:
            record = json.loads(line)
            step = int(record["step"])
        except (ValueError, KeyError, TypeError) as error:
            if position == len(numbered) - 1:
                notes.append(f"{path}: skipped an unreadable last line {number} (a run stopped mid-write?)")
                continue
            raise ValueError(f"{path}:{number}: not a JSON object with a 'step' ({error}); "
                             "fix or delete that line") from error
        by_step[step] = record
    return [by_step[s] for s in sorted(by_step)], notes


def metric_series(records: list[dict[str, Any]]) -> dict[str, Series]:
    """{metric: Series} over the records, skipping null/missing/non-finite values."""
    points: dict[str, tuple[list[int], list[float]]] = {}
    for record in records:
        step = int(record["step"])
        for key, value in record.items():
            if key == "step" or not _finite(value):
                continue
            steps, values = points.setdefault(key, ([], []))
            steps.append(step)
            values.append(float(value))
    return {k: Series(tuple(s), tuple(v)) for k, (s, v) in points.items()}


def load_run(path: str | Path, name: str | None = None) -> Run:
    """Read one run directory; ``name`` defaults to the folder name."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: no such run directory; pass a folder written by `rlvr train` or `rlvr sft`")
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{path}: no metrics.jsonl here; pass the run's output_dir "
                         "(the folder holding config.yaml and metrics.jsonl)")
    records, notes = read_metrics(metrics)
    if not records:
        raise ValueError(f"{metrics} has no steps yet; report a run after its first step is logged")
    config: dict[str, Any] = {}
    config_path = path / "config.yaml"
    if config_path.is_file():
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    else:
        notes.append(f"{path}: no config.yaml; its settings are unknown")
    return Run(name or path.resolve().name, path, config, records, metric_series(records), notes)


def load_runs(paths: list[str | Path], names: list[str] | None = None) -> list[Run]:
    """Read several runs; names must be as many as the runs and distinct (they label the plots)."""
    if not paths:
        raise ValueError("give at least one run directory")
    if names is not None and len(names) != len(paths):
        raise ValueError(f"--names gives {len(names)} names for {len(paths)} run directories; give one per run")
    if names is not None and not all(n.strip() for n in names):
        raise ValueError(f"--names has an empty name ({','.join(names)!r}); give one non-empty name per run")
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    seen: dict[str, Path] = {}
    for run in runs:
        if run.name in seen:
            raise ValueError(f"two runs are both named {run.name!r} ({seen[run.name]} and {run.path}); "
                             "name them with --names a,b,...")
        seen[run.name] = run.path
    return runs


def load_eval(path: str | Path, label: str | None = None, run_name: str | None = None) -> EvalResult:
    """Read one ``rlvr eval`` result file (format: the docstring of ``rlvr.eval.runner``)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such eval file; pass a JSON written by `rlvr eval`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), dict):
        raise ValueError(f"{path}: not an `rlvr eval` result (needs a 'datasets' object)")
    datasets = {}
    for spec, result in data["datasets"].items():
        passk = result.get("pass@k") or {}
        try:
            converted = {int(k): float(v) for k, v in passk.items() if _finite(v)}
        except ValueError as error:
            raise ValueError(f"{path}: dataset {spec!r} has a pass@k key that is not an integer k") from error
        datasets[spec] = {**result, "pass@k": dict(sorted(converted.items()))}
    return EvalResult(label or path.stem, path, str(data.get("model", "?")), dict(data.get("settings") or {}),
                      datasets, run_name)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def load_evals(runs: list[Run], extra_files: list[str | Path] = ()) -> list[EvalResult]:
    """Eval files of the runs (``<run>/eval/*.json``) and the extra files, each read once.

    An extra file may be given as ``NAME=FILE.json`` to label it NAME (when it is no run's).

    An extra file belongs to a run when it lies inside the run directory or its ``model`` is a
    path inside it (a checkpoint); otherwise it is labelled by its file stem. When a run has
    several eval files, each label adds the file stem. A file found in a run's eval/ folder that
    is not an eval result is noted on the run and left out; a bad ``extra_files`` one is an error.
    """
    named = dict(split_eval_name(p) for p in extra_files)  # path -> label given as NAME=FILE.json
    labels = {Path(p).resolve(): label for p, label in named.items() if label}
    explicit = {Path(p).resolve() for p in named}
    found: dict[Path, tuple[Path, Run | None]] = {}
    for run in runs:
        for path in sorted((run.path / "eval").glob("*.json")):
            found.setdefault(path.resolve(), (path, run))
    for extra in map(Path, named):
        found.setdefault(extra.resolve(), (extra, next((r for r in runs if _inside(extra, r.path)), None)))
    results = []
    for key, (path, owner) in found.items():
        try:
            result = load_eval(path)
        except ValueError as error:
            if key in explicit:
                raise
            owner.notes.append(f"left out {error}")
            continue
        if owner is None:
            owner = next((r for r in runs if _model_in_run(result.model, r)), None)
        if owner is not None:
            result.label, result.run_name = owner.name, owner.name
        elif key in labels:
            result.label = labels[key]
        results.append(result)
    counts: dict[str, int] = {}
    for result in results:
        counts[result.label] = counts.get(result.label, 0) + 1
    for result in results:
        if counts[result.label] > 1:
            result.label = f"{result.label} ({result.path.stem})"
    return results


def split_eval_name(argument: str | Path) -> tuple[str, str | None]:
    """``NAME=FILE.json`` -> (FILE.json, NAME); a plain path (or one that exists as given) -> (path, None)."""
    text = str(argument)
    name, sep, rest = text.partition("=")
    if sep and name and "/" not in name and not Path(text).exists():
        return rest, name
    return text, None


def _model_in_run(model: str, run: Run) -> bool:
    """Whether ``model`` names a folder inside the run (absolute, or relative to where we run)."""
    candidate = Path(model).expanduser()
    return (candidate.is_absolute() or candidate.exists()) and _inside(candidate, run.path)
