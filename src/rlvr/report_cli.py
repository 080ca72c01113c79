"""``rlvr report RUN_DIR [RUN_DIR ...] [--out DIR] [--eval FILE.json ...] [--names a,b,...]``. Thin."""

from __future__ import annotations

import argparse
import shlex
import sys


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    report = subparsers.add_parser(
        "report",
        help="plots and a markdown summary of one or more runs",
        description="Write report.md and one PNG per panel (reward, uniform groups, grad norm, "
        "response length, entropy, KL, loss, DaGRPO masked pairs and anchor rate, pass@k, time per "
        "phase) for one or more run directories, overlaid. Eval files in each run's eval/ folder "
        "are read too. Examples:\n  rlvr report runs/grpo\n"
        "  rlvr report runs/grpo runs/dagrpo --names grpo,dagrpo --out reports/cmp "
        "--eval evals/base.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (holding metrics.jsonl)")
    report.add_argument("--out", help="output folder (default: <first RUN_DIR>/report)")
    report.add_argument("--eval", dest="eval_files", action="append", default=[], metavar="FILE.json",
                        help="an `rlvr eval` result file to add (repeatable); NAME=FILE.json labels it NAME")
    report.add_argument("--names", help="comma-separated run names for the legends (default: folder names)")
    report.add_argument("--group-seeds", action="store_true",
                        help="plot runs named <arm>/seed<k> (or -seed<k>, _seed<k>) as one line per arm: the "
                        "mean over seeds with a min-max band (eval files too); report.md keeps every run")
    report.add_argument("--smooth", type=int, default=1, metavar="W",
                        help="plot each curve as its trailing mean over W logged steps (default 1: raw)")
    return report


def command_line(args: argparse.Namespace) -> str:
    """The command, rebuilt from the parsed arguments (equivalent to what was typed)."""
    parts = ["rlvr", "report", *args.runs]
    if args.out:
        parts += ["--out", args.out]
    for path in args.eval_files:
        parts += ["--eval", path]
    if args.names:
        parts += ["--names", args.names]
    if args.group_seeds:
        parts.append("--group-seeds")
    if args.smooth != 1:
        parts += ["--smooth", str(args.smooth)]
    return shlex.join(parts)


def run_report(args: argparse.Namespace) -> int:
    from rlvr.report import make_report  # matplotlib only when reporting

    names = [n.strip() for n in args.names.split(",")] if args.names else None
    try:
        path = make_report(args.runs, args.out, args.eval_files, names, command_line(args),
                           group_seeds=args.group_seeds, smooth=args.smooth)
    except ValueError as error:
        print(f"rlvr report: {error}", file=sys.stderr)
        return 2
    print(f"rlvr report: wrote {path}", flush=True)
    return 0
