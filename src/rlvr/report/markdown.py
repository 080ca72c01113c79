"""report.md: a summary table per run, the plots with captions, the settings that differ between
runs, eval results, and the command line that produced the report.

"reward first k → last k" is the mean of ``rollout/reward_mean`` over the first and the last k
logged steps, k = max(1, min(10, steps // 2)) (the trainer's own end-of-run line uses at most 3).
"""

from __future__ import annotations

import datetime as _dt
import statistics
from typing import Any

from rlvr.report.load import EvalResult, Run
from rlvr.report.plots import PANELS, Drawn

IGNORED_SETTINGS = {"run.output_dir"}  # differs between any two runs; the run paths are listed


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def reward_trend(run: Run) -> tuple[int, float, float] | None:
    """(k, mean of the first k, mean of the last k) of rollout/reward_mean, or None if not logged."""
    series = run.get("rollout/reward_mean")
    if series is None:
        return None
    k = max(1, min(10, len(series) // 2))
    return k, statistics.fmean(series.values[:k]), statistics.fmean(series.values[-k:])


def spike_count(run: Run) -> int | None:
    """Steps flagged as grad-norm spikes (train/grad_norm_spike summed; else the running count)."""
    if run.has("train/grad_norm_spike"):
        return int(sum(run.get("train/grad_norm_spike").values))
    if run.has("train/grad_norm_spikes"):
        return int(run.get("train/grad_norm_spikes").values[-1])
    return None


def best_passk(evals: list[EvalResult], run_name: str, spec: str) -> dict[int, float]:
    """For each k, the highest pass@k on ``spec`` over the run's eval files."""
    best: dict[int, float] = {}
    for result in evals:
        if result.run_name == run_name and spec in result.datasets:
            for k, value in result.datasets[spec]["pass@k"].items():
                best[k] = max(best.get(k, value), value)
    return best


def _passk_text(best: dict[int, float]) -> str | None:
    if not best:
        return None
    ks = sorted({min(best), max(best)})
    return ", ".join(f"pass@{k} {best[k]:.3f}" for k in ks)


def summary_rows(runs: list[Run], evals: list[EvalResult]) -> tuple[list[str], list[list[Any]]]:
    specs = sorted({spec for e in evals if e.run_name for spec in e.datasets})
    header = ["run", "algo", "steps", "reward first k → last k", "final uniform frac",
              "mean step s", "total min", "grad-norm spikes", *(f"best {s}" for s in specs)]
    rows = []
    for run in runs:
        trend = reward_trend(run)
        uniform = run.get("rollout/frac_uniform_groups")
        pooled = run.get("tagrpo/frac_uniform_pools")
        variant = run.get("tagrpo/frac_uniform_variant_groups")
        if pooled is not None and variant is not None:
            uniform_text = f"{pooled.values[-1]:.3f} pooled / {variant.values[-1]:.3f} per-variant"
        else:
            uniform_text = None if uniform is None else f"{uniform.values[-1]:.3f}"
        step_time = run.get("time/step_s")
        rows.append([
            run.name, run.algo, run.num_steps,
            None if trend is None else f"{trend[1]:.3f} → {trend[2]:.3f} (k={trend[0]})",
            uniform_text,
            None if step_time is None else f"{statistics.fmean(step_time.values):.2f}",
            None if step_time is None else f"{sum(step_time.values) / 60:.2f}",
            spike_count(run),
            *(_passk_text(best_passk(evals, run.name, s)) for s in specs),
        ])
    return header, rows


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def differing_settings(runs: list[Run]) -> dict[str, list[Any]]:
    """{section.key: [value per run]} for the config.yaml settings whose values differ."""
    flats = [_flatten(r.config) for r in runs]
    keys = sorted({k for f in flats for k in f} - IGNORED_SETTINGS)
    missing = object()
    differing = {}
    for key in keys:
        values = [f.get(key, missing) for f in flats]
        if any(v != values[0] for v in values[1:]):
            differing[key] = ["(absent)" if v is missing else v for v in values]
    return differing


def _eval_section(evals: list[EvalResult]) -> list[str]:
    ks = sorted({k for e in evals for d in e.datasets.values() for k in d["pass@k"]})
    header = ["eval", "dataset", "problems", *(f"pass@{k}" for k in ks), "greedy", "all wrong", "diversity"]
    rows = [[e.label, spec, d.get("num_problems"), *(d["pass@k"].get(k) for k in ks),
             d.get("greedy_accuracy"), d.get("frac_all_wrong"), d.get("diversity")]
            for e in evals for spec, d in e.datasets.items()]
    lines = ["## Eval results", "", *_table(header, rows), ""]
    for e in evals:
        settings = ", ".join(f"{k}={v}" for k, v in e.settings.items())
        lines.append(f"- **{e.label}**: `{e.path}`; model `{e.model}`; {settings or 'no settings recorded'}")
    return [*lines, ""]


def render_markdown(runs: list[Run], evals: list[EvalResult], drawn: dict[str, Drawn],
                    skipped: list[str], command: str, cwd: str, plot_note: str = "") -> str:
    lines = ["# rlvr report", "",
             f"Produced {_dt.datetime.now().isoformat(timespec='seconds')} in `{cwd}` by:", "",
             "```", command, "```", "", "## Summary", ""]
    lines += _table(*summary_rows(runs, evals))
    lines += ["", *(f"- **{r.name}**: `{r.path}`" for r in runs)]
    notes = [n for r in runs for n in r.notes]
    lines += ["", *(f"- note: {n}" for n in notes), ""] if notes else [""]
    lines += ["## Settings that differ", ""]
    if len(runs) == 1:
        lines.append(f"One run; its full settings are in `{runs[0].path / 'config.yaml'}`.")
    else:
        differing = differing_settings(runs)
        if differing:
            lines += _table(["setting", *(r.name for r in runs)], [[k, *v] for k, v in differing.items()])
        else:
            lines.append("None: the runs' config.yaml agree on every setting but output_dir.")
    lines.append("")
    if evals:
        lines += _eval_section(evals)
    lines += ["## Plots", "", *([plot_note, ""] if plot_note else [])]
    for name, result in drawn.items():
        panel = PANELS[name]
        lines += [f"### {name.replace('_', ' ')}", "", f"![{name}]({result.path.name})", "",
                  f"*{panel.caption}*", ""]
    if skipped:
        lines.append("Skipped (no run has their data): " + ", ".join(f"`{n}`" for n in skipped) + ".")
        lines.append("")
    return "\n".join(lines)
