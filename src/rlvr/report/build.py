"""Make a report: read the runs and eval files, draw the panels, write report.md beside them."""

from __future__ import annotations

import os
from pathlib import Path

from rlvr.report.load import load_evals, load_runs
from rlvr.report.markdown import render_markdown
from rlvr.report.plots import PANELS, render_panels


def make_report(run_dirs: list[str | Path], out: str | Path | None = None, eval_files: list[str | Path] = (),
                names: list[str] | None = None, command: str = "") -> Path:
    """Write ``report.md`` and one PNG per panel into ``out`` (default ``<first run>/report``).

    A skipped panel's PNG left by an earlier report in ``out`` is removed, so the folder shows
    only what report.md describes. Returns the path of report.md.
    """
    runs = load_runs(list(run_dirs), names)
    evals = load_evals(runs, list(eval_files))
    out_dir = Path(out) if out is not None else runs[0].path / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn, skipped = render_panels(runs, evals, out_dir)
    for name in skipped:
        (out_dir / PANELS[name].file).unlink(missing_ok=True)
    path = out_dir / "report.md"
    path.write_text(render_markdown(runs, evals, drawn, skipped, command, os.getcwd()), encoding="utf-8")
    return path
