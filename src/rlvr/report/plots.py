"""One PNG per panel, several runs overlaid, each run in the same colour in every panel.

Every panel function has one signature, ``fn(runs, evals, path) -> Drawn | None``: it draws what
the runs (and eval files) hold, writes ``path`` and returns what it drew, read back from the
matplotlib artists (so a test checks the picture's numbers, not a copy made beside it). It
returns None, writing nothing, when no run has its data; the report lists those as skipped.
Matplotlib is used through ``Figure`` + the Agg canvas, never pyplot: no display, no global state.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rlvr.report.load import EvalResult, Run

PHASES = ("rollout", "reward", "score", "update")  # time/<phase>_s; "other" = step_s − their sum
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


@dataclass
class Drawn:
    """What a panel drew. ``lines``: legend label → (xs, ys) of each labelled line, as drawn."""

    path: Path
    lines: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]
    legend: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


def _color(runs: list[Run], run: Run) -> str:
    return COLORS[runs.index(run) % len(COLORS)]


def _axes(title: str, xlabel: str, ylabel: str):
    fig = Figure(figsize=(7.5, 4.2), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.set_axisbelow(True)
    return fig, ax


def _finish(fig, ax, path: Path, extra: dict[str, Any] | None = None, legend_handles=None) -> Drawn:
    handles, labels = ax.get_legend_handles_labels()
    if legend_handles:
        handles += legend_handles
        labels += [h.get_label() for h in legend_handles]
    if handles:
        ax.legend(handles, labels, fontsize="small", loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    lines = {
        line.get_label(): (tuple(float(x) for x in line.get_xdata()), tuple(float(y) for y in line.get_ydata()))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }
    legend = ax.get_legend()
    shown = [t.get_text() for t in legend.get_texts()] if legend else []
    return Drawn(path, lines, shown, extra or {})


def _step_axis(ax) -> None:
    ax.xaxis.get_major_locator().set_params(integer=True)


def _seed_band(ax, run: Run, key: str, color: str, bands: dict | None = None) -> bool:
    """A grouped run's min-max band over its seeds for ``key`` (report.groups); False if none."""
    band = run.bands.get(key)
    if band is None:
        return False
    ax.fill_between(band[0], band[1], band[2], color=color, alpha=0.18, linewidth=0)
    if bands is not None:
        bands[run.name] = band
    return True


def line_panel(key: str, title: str, ylabel: str) -> Callable[[list[Run], list[EvalResult], Path], Drawn | None]:
    """A panel of one metric against step, one line per run that logged it."""

    def draw(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
        having = [r for r in runs if r.has(key)]
        if not having:
            return None
        fig, ax = _axes(title, "step", ylabel)
        bands = {}
        for run in having:
            series, color = run.get(key), _color(runs, run)
            ax.plot(series.steps, series.values, label=run.name, color=color,
                    marker="." if len(series) < 30 else None)
            _seed_band(ax, run, key, color, bands)
        _step_axis(ax)
        return _finish(fig, ax, path, {"bands": bands})

    return draw


def reward_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """rollout/reward_mean per step, with a band of ± rollout/reward_std (std over all responses)."""
    having = [r for r in runs if r.has("rollout/reward_mean")]
    if not having:
        return None
    grouped = any(r.bands for r in having)
    fig, ax = _axes("Reward (mean over the step's responses, band = "
                    + ("min–max over seeds)" if grouped else "± std)"), "step", "reward")
    bands = {}
    for run in having:
        mean, color = run.get("rollout/reward_mean"), _color(runs, run)
        ax.plot(mean.steps, mean.values, label=run.name, color=color, marker="." if len(mean) < 30 else None)
        std = run.get("rollout/reward_std")
        if _seed_band(ax, run, "rollout/reward_mean", color, bands):
            pass  # a group of seeds: the band is their spread, not the responses' std
        elif std is not None:
            by_step = dict(zip(mean.steps, mean.values))
            steps = [s for s in std.steps if s in by_step]
            sd = dict(zip(std.steps, std.values))
            low = [by_step[s] - sd[s] for s in steps]
            high = [by_step[s] + sd[s] for s in steps]
            ax.fill_between(steps, low, high, color=color, alpha=0.15, linewidth=0)
            bands[run.name] = (tuple(steps), tuple(low), tuple(high))
    _step_axis(ax)
    return _finish(fig, ax, path, {"bands": bands})


def uniform_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """Fraction of groups whose rewards are all equal (zero advantage, no gradient).

    TA-GRPO runs show two lines: per variant group (G responses to one phrasing, dashed) and
    per pool (all phrasings of a problem, solid) — the gap is what pooling rescues.
    """
    variant, pooled = "tagrpo/frac_uniform_variant_groups", "tagrpo/frac_uniform_pools"
    fig, ax = _axes("Uniform-reward groups (zero advantage, no gradient)", "step", "fraction of groups")
    drew = False
    for run in runs:
        color = _color(runs, run)
        if run.has(variant) or run.has(pooled):
            for key, suffix, style in ((variant, "per-variant", "--"), (pooled, "pooled", "-")):
                if run.has(key):
                    series = run.get(key)
                    ax.plot(series.steps, series.values, style, label=f"{run.name} ({suffix})", color=color)
                    _seed_band(ax, run, key, color)
                    drew = True
        elif run.has("rollout/frac_uniform_groups"):
            series = run.get("rollout/frac_uniform_groups")
            ax.plot(series.steps, series.values, label=run.name, color=color)
            _seed_band(ax, run, "rollout/frac_uniform_groups", color)
            drew = True
    if not drew:
        return None
    ax.set_ylim(-0.03, 1.03)
    _step_axis(ax)
    return _finish(fig, ax, path)


def grad_norm_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """train/grad_norm (before clipping); steps with train/grad_norm_spike = 1 marked with ×."""
    having = [r for r in runs if r.has("train/grad_norm")]
    if not having:
        return None
    fig, ax = _axes("Gradient norm (before clipping; × = spike)", "step", "grad norm")
    spikes = {}
    for run in having:
        norm, color = run.get("train/grad_norm"), _color(runs, run)
        ax.plot(norm.steps, norm.values, label=run.name, color=color)
        _seed_band(ax, run, "train/grad_norm", color)
        flags = run.get("train/grad_norm_spike")
        if flags is not None:
            flagged = {s for s, v in zip(flags.steps, flags.values) if v > 0}
            points = [(s, v) for s, v in zip(norm.steps, norm.values) if s in flagged]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, "x", color=color, markersize=10, markeredgewidth=2, clip_on=False, label="_spikes")
                spikes[run.name] = (tuple(float(x) for x in xs), tuple(ys))
    handles = [Line2D([], [], linestyle="", marker="x", color="black", label="spike")] if spikes else None
    _step_axis(ax)
    return _finish(fig, ax, path, {"spikes": spikes}, handles)


def passk_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """pass@k against k (log2 axis) from eval files: one plot per dataset, one line per eval file.

    Lines are labelled "<eval label>: <dataset>" in ``Drawn.lines`` when there are several
    datasets (each plot is titled by its dataset; the legend names the eval files once). A grouped
    eval (report.groups) is the mean over its seeds with a min-max band.
    """
    curves = [(e, spec, d) for e in evals for spec, d in e.datasets.items() if d["pass@k"]]
    if not curves:
        return None
    specs = list(dict.fromkeys(spec for _, spec, _ in curves))
    fig = Figure(figsize=(min(3.6 * len(specs), 14.0) + 2.6, 4.2), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(specs), squeeze=False, sharey=True)[0]
    fig.suptitle("pass@k" + (f" on {specs[0]}" if len(specs) == 1 else "") + _settings_note(evals))
    markers = "os^Dv<>p"
    by_run = {r.name: r for r in runs}
    others = [e.label for e in evals if e.run_name not in by_run]
    lines, handles = {}, {}
    for ax, spec in zip(axes, specs):
        if len(specs) > 1:
            ax.set_title(spec, fontsize="small")
        ax.set_xlabel("k")
        ax.grid(True, alpha=0.3)
        ax.set_axisbelow(True)
        for result, curve_spec, data in curves:
            if curve_spec != spec:
                continue
            if result.run_name in by_run:
                color = _color(runs, by_run[result.run_name])
            else:
                color = COLORS[(len(runs) + others.index(result.label)) % len(COLORS)]
            passk = data["pass@k"]
            xs, ys = [float(k) for k in passk], list(passk.values())
            ax.plot(xs, ys, marker=markers[specs.index(spec) % len(markers)], markersize=4,
                    label=result.label, color=color)
            band = data.get("pass@k_band")
            if band:
                ax.fill_between([float(k) for k in band], [lo for lo, _ in band.values()],
                                [hi for _, hi in band.values()], color=color, alpha=0.18, linewidth=0)
            lines[result.label if len(specs) == 1 else f"{result.label}: {spec}"] = (tuple(xs), tuple(ys))
            handles.setdefault(result.label, Line2D([], [], color=color, marker="o", markersize=4,
                                                    label=result.label))
        ks = sorted({k for _, s, d in curves if s == spec for k in d["pass@k"]})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) if k in (1, 2, 4, 8, 16, 32, 64, 128) or len(ks) <= 6 else "" for k in ks])
        ax.minorticks_off()
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("pass@k")
    fig.legend(list(handles.values()), list(handles), fontsize="small", loc="outside right upper")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return Drawn(path, lines, list(handles))


def _settings_note(evals: list[EvalResult]) -> str:
    parts = []
    for key, short in (("n", "n"), ("temperature", "T"), ("top_p", "top_p")):
        values = {str(e.settings.get(key)) for e in evals if key in e.settings}
        if len(values) == 1:
            parts.append(f"{short}={values.pop()}")
    return f" ({', '.join(parts)})" if parts else ""


def phase_means(run: Run) -> dict[str, float]:
    """Mean seconds per step of each phase the run logged; "other" = mean step_s − their sum."""
    means = {p: statistics.fmean(run.get(f"time/{p}_s").values) for p in PHASES if run.has(f"time/{p}_s")}
    if run.has("time/step_s"):
        other = statistics.fmean(run.get("time/step_s").values) - sum(means.values())
        if other > 0:
            means["other"] = other
    return means


def time_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """Stacked bars: mean seconds per step spent in each phase, one bar per run."""
    bars = {r.name: phase_means(r) for r in runs}
    bars = {name: means for name, means in bars.items() if means}
    if not bars:
        return None
    fig, ax = _axes("Time per step by phase (mean over steps)", "run", "seconds per step")
    names = list(bars)
    bottoms = [0.0] * len(names)
    phase_colors = dict(zip((*PHASES, "other"), ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#b0b0b0")))
    for phase in (*PHASES, "other"):
        heights = [bars[n].get(phase, 0.0) for n in names]
        if any(heights):
            ax.bar(names, heights, bottom=bottoms, label=phase, color=phase_colors[phase], width=0.6)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, total in enumerate(bottoms):
        ax.annotate(f"{total:.2f} s", (i, total), ha="center", va="bottom", fontsize="small")
    ax.set_ylim(0, max(bottoms) * 1.15 or 1)
    return _finish(fig, ax, path, {"bars": bars})


def eval_during_training_panel(runs: list[Run], evals: list[EvalResult], path: Path) -> Drawn | None:
    """eval/<dataset>/pass@<k> logged by the trainer, against step."""
    keys = sorted({k for r in runs for k in r.series if k.startswith("eval/")})
    if not keys:
        return None
    fig, ax = _axes("Evaluation during training", "step", "score")
    styles = ("-", "--", ":", "-.")
    for run in runs:
        for i, key in enumerate(keys):
            if run.has(key):
                series = run.get(key)
                ax.plot(series.steps, series.values, styles[i % len(styles)], marker="o",
                        label=f"{run.name}: {key.removeprefix('eval/')}", color=_color(runs, run))
    _step_axis(ax)
    return _finish(fig, ax, path)


@dataclass(frozen=True)
class Panel:
    file: str
    caption: str
    draw: Callable[[list[Run], list[EvalResult], Path], Drawn | None]


PANELS: dict[str, Panel] = {
    "reward": Panel("reward.png", "Mean reward per step (`rollout/reward_mean`); the band is ± "
                    "`rollout/reward_std`, the std over all of the step's responses.", reward_panel),
    "uniform_groups": Panel("uniform_groups.png", "Fraction of groups whose rewards are all equal "
                            "(`rollout/frac_uniform_groups`): they get zero advantage and no gradient. "
                            "TA-GRPO runs: per variant group (dashed) vs per pool (solid).", uniform_panel),
    "grad_norm": Panel("grad_norm.png", "Gradient norm before clipping (`train/grad_norm`); × marks "
                       "steps flagged as spikes (`train/grad_norm_spike`).", grad_norm_panel),
    "response_length": Panel("response_length.png", "Mean response length in tokens "
                             "(`rollout/response_len_mean`).",
                             line_panel("rollout/response_len_mean", "Response length", "tokens (mean)")),
    "entropy": Panel("entropy.png", "Mean per-token entropy of the policy (`train/entropy`).",
                     line_panel("train/entropy", "Policy entropy", "nats per token")),
    "kl": Panel("kl.png", "KL to the reference (`train/kl`, k3 estimator); only runs with β > 0 log it.",
                line_panel("train/kl", "KL to the reference policy", "KL (k3)")),
    "loss": Panel("loss.png", "Training loss (`train/loss`).", line_panel("train/loss", "Loss", "loss")),
    "masked_pairs": Panel("masked_pairs.png", "DaGRPO: fraction of response pairs masked out "
                          "(`dagrpo/masked_pair_frac`).",
                          line_panel("dagrpo/masked_pair_frac", "DaGRPO masked pairs", "fraction of pairs")),
    "anchor_rate": Panel("anchor_rate.png", "DaGRPO: rate of groups given an expert anchor "
                         "(`dagrpo/anchor_rate`).",
                         line_panel("dagrpo/anchor_rate", "DaGRPO anchor rate", "anchor rate")),
    "eval_during_training": Panel("eval_during_training.png", "Evaluation logged by the trainer "
                                  "(`eval/<dataset>/pass@<k>`).", eval_during_training_panel),
    "pass_at_k": Panel("pass_at_k.png", "pass@k against k (log₂ axis) from the eval result files, one "
                       "line per run and dataset.", passk_panel),
    "time": Panel("time.png", "Mean seconds per step in each phase (`time/<phase>_s`); \"other\" is "
                  "`time/step_s` minus the phases.", time_panel),
}


def render_panels(runs: list[Run], evals: list[EvalResult], out_dir: Path) -> tuple[dict[str, Drawn], list[str]]:
    """Draw every panel into ``out_dir``: ({panel: Drawn} of those drawn, [names skipped])."""
    drawn, skipped = {}, []
    for name, panel in PANELS.items():
        result = panel.draw(runs, evals, out_dir / panel.file)
        if result is None:
            skipped.append(name)
        else:
            drawn[name] = result
    return drawn, skipped
