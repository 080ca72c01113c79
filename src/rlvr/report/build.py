"""Make a report: read the runs and eval files, draw the panels, write report.md beside them."""

from __future__ import annotations

import os
from pathlib import Path

from rlvr.report.groups import group_evals, group_runs, smooth_runs
from rlvr.report.load import load_evals, load_runs
from rlvr.report.markdown import render_markdown
from rlvr.report.plots import PANELS, render_panels


def make_report(run_dirs: list[str | Path], out: str | Path | None = None, eval_files: list[str | Path] = (),
                names: list[str] | None = None, command: str = "", group_seeds: bool = False,
                smooth: int = 1) -> Path:
    """Write ``report.md`` and one PNG per panel into ``out`` (default ``<first run>/report``).

    ``group_seeds`` and ``smooth`` change the plots only (report.groups); report.md's tables keep
    one row per run.

    A skipped panel's PNG left by an earlier report in ``out`` is removed, so the folder shows
    only what report.md describes. Returns the path of report.md.
    """
    if smooth < 1:
        raise ValueError(f"--smooth {smooth}: give a window of at least 1 logged step (1 = no smoothing)")
    runs = load_runs(list(run_dirs), names)
    evals = load_evals(runs, list(eval_files))
    out_dir = Path(out) if out is not None else runs[0].path / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_runs, plot_evals, notes = smooth_runs(runs, smooth), evals, []
    if smooth > 1:
        notes.append(f"Smoothed: each run's curves are the trailing mean over {smooth} logged steps "
                     "(grad norm raw).")
    if group_seeds:
        plot_runs, plot_evals = group_runs(plot_runs), group_evals(evals, runs)
        groups = [f"{r.name} = {' + '.join(r.members)}" for r in plot_runs if r.members]
        notes.append("Seeds grouped: a line is the mean over a group's runs at the steps all logged, the band "
                     "their min–max (" + ("; ".join(groups) or "no run had a seed suffix") + ").")
    drawn, skipped = render_panels(plot_runs, plot_evals, out_dir)
    for name in skipped:
        (out_dir / PANELS[name].file).unlink(missing_ok=True)
    path = out_dir / "report.md"
    path.write_text(render_markdown(runs, evals, drawn, skipped, command, os.getcwd(), " ".join(notes)), encoding="utf-8")
    return path
