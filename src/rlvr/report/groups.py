"""Seeds drawn as one line, and smoothing: what the plots show when runs are many and noisy.

``rlvr report ... --group-seeds``: runs whose names differ only by a trailing seed
(``grpo/seed0``, ``grpo-seed1``, ``grpo_seed2``) form one group (``grpo``). Its line is the mean
over its runs at each step that every one of them logged, and a band spans their min to max.
Their eval files are averaged the same way, per dataset and k (eval files with the same file
name only, so a run's several evaluations are not mixed). report.md keeps one row per run.

``--smooth W``: each run's series is replaced by its trailing mean over the last W logged points
(before grouping), except the grad-norm series, whose spikes are marked on the raw values.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import replace

from rlvr.report.load import EvalResult, Run, Series

SEED_SUFFIX = re.compile(r"[/_-]seed\d+$")
RAW_KEYS = frozenset({"train/grad_norm", "train/grad_norm_spike", "train/grad_norm_spikes"})


def group_of(name: str) -> str:
    """The group a run name belongs to: the name without a trailing ``/seed<k>``, ``-seed<k>``, ``_seed<k>``."""
    return SEED_SUFFIX.sub("", name) or name


def smooth(series: Series, window: int) -> Series:
    """Trailing mean over the last ``window`` logged points (the first points average fewer)."""
    values = series.values
    return Series(series.steps, tuple(statistics.fmean(values[max(0, i - window + 1):i + 1])
                                      for i in range(len(values))))


def smooth_runs(runs: list[Run], window: int) -> list[Run]:
    """Copies of the runs with every series but the grad-norm ones smoothed (window <= 1: unchanged)."""
    if window <= 1:
        return runs
    return [replace(run, series={key: series if key in RAW_KEYS else smooth(series, window)
                                 for key, series in run.series.items()}) for run in runs]


def mean_and_band(members: list[Series]) -> tuple[Series, tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]]:
    """Mean over the series at the steps all of them have, and (steps, min, max) there."""
    common = sorted(set.intersection(*(set(s.steps) for s in members)))
    by_step = [dict(zip(s.steps, s.values)) for s in members]
    columns = [[values[step] for values in by_step] for step in common]
    steps = tuple(common)
    return (Series(steps, tuple(statistics.fmean(c) for c in columns)),
            (steps, tuple(min(c) for c in columns), tuple(max(c) for c in columns)))


def group_runs(runs: list[Run]) -> list[Run]:
    """One Run per group, in the order groups first appear; a group of one keeps its run as it is."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(group_of(run.name), []).append(run)
    grouped = []
    for name, members in groups.items():
        if len(members) == 1:
            grouped.append(members[0])
            continue
        series, bands = {}, {}
        for key in sorted(set.intersection(*(set(m.series) for m in members))):
            mean, band = mean_and_band([m.series[key] for m in members])
            if mean.steps:
                series[key], bands[key] = mean, band
        first = members[0]
        grouped.append(Run(name, first.path, first.config, [], series, [], bands=bands,
                           members=[m.name for m in members]))
    return grouped


def group_evals(evals: list[EvalResult], runs: list[Run]) -> list[EvalResult]:
    """Eval files of the runs of one group (same file name) averaged per dataset and k, with a
    band; files of runs alone in their group, and files of no run, are kept as they are."""
    group_size: dict[str, int] = {}
    for run in runs:
        group_size[group_of(run.name)] = group_size.get(group_of(run.name), 0) + 1
    groups: dict[tuple[str, str], list[EvalResult]] = {}
    kept = []
    for result in evals:
        if result.run_name is None or group_size.get(group_of(result.run_name), 1) == 1:
            kept.append(result)
        else:
            groups.setdefault((group_of(result.run_name), result.path.name), []).append(result)
    files_per_group: dict[str, int] = {}
    for group, _ in groups:
        files_per_group[group] = files_per_group.get(group, 0) + 1
    grouped = []
    for (group, file_name), members in groups.items():
        datasets = {}
        for spec, first in members[0].datasets.items():
            if not all(spec in m.datasets for m in members):
                continue
            ks = sorted(set.intersection(*(set(m.datasets[spec]["pass@k"]) for m in members)))
            columns = {k: [m.datasets[spec]["pass@k"][k] for m in members] for k in ks}
            datasets[spec] = {"num_problems": first.get("num_problems"),
                              "pass@k": {k: statistics.fmean(c) for k, c in columns.items()},
                              "pass@k_band": {k: (min(c), max(c)) for k, c in columns.items()}}
        label = group if files_per_group[group] == 1 else f"{group} ({file_name.removesuffix('.json')})"
        first = members[0]
        grouped.append(EvalResult(label, first.path, first.model, first.settings, datasets, run_name=group))
    return kept + grouped
