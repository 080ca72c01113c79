"""Run a study: every arm x seed trained with `rlvr train`, evaluated with `rlvr eval`, reported.

A study is a YAML file (experiments/<study>.yaml):

    name, question        what it compares and why
    seeds                 e.g. [0, 1]
    common                `rlvr train` options shared by every arm
    arms                  arm name -> its own options (on top of common)
    eval                  `rlvr eval` options for the final policy (data, n, k, limit, ...)
    scales                optional: scale name -> options replacing common/eval keys (e.g. gpu)

Everything is resumable: a run whose final checkpoint exists is not trained again, a run with an
earlier checkpoint continues (resume=true), and `rlvr eval` resumes from its problems file. So
the same command can be re-run after an interruption, in a later session, until the study is done.

Outputs (experiments/results/<study>[-<scale>]/):
    <arm>/seed<k>/          the run directory: config.yaml, metrics.jsonl, samples.jsonl,
                            eval.json + eval.problems.jsonl (the checkpoint-N/ folders and
                            the final model are git-ignored)
    report/                 `rlvr report` over every finished run (plots + report.md)
    summary.json, summary.md  per arm: mean and spread over seeds (experiments/summarize.py)
    commands.log            every command run, with its wall time
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent  # commands run here; paths in them are relative to it
RESULTS = Path("experiments") / "results"
REPORT_SMOOTHING = 5  # steps; the summaries' reward_last is the same 5-step mean


def load_study(path: Path, scale: str | None) -> dict:
    """The study's YAML, with a scale's overrides applied to ``common`` and ``eval``."""
    study = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in ("name", "seeds", "common", "arms", "eval"):
        if key not in study:
            raise SystemExit(f"{path}: missing {key!r}")
    if scale:
        scales = study.get("scales") or {}
        if scale not in scales:
            raise SystemExit(f"{path}: no scale {scale!r}; choose one of {sorted(scales)}")
        study["common"] = {**study["common"], **scales[scale].get("common", {})}
        study["eval"] = {**study["eval"], **scales[scale].get("eval", {})}
        study["name"] = f"{study['name']}-{scale}"
    return study


def cli_value(value) -> str:
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def train_command(study: dict, arm: str, seed: int, run_dir: Path) -> list[str]:
    options = {**study["common"], **(study["arms"][arm] or {}), "seed": seed, "output_dir": str(run_dir),
               "progress_bar": False}
    return [sys.executable, "-m", "rlvr.cli", "train", *(f"{k}={cli_value(v)}" for k, v in options.items())]


def eval_command(study: dict, model_dir: Path | str, out: Path) -> list[str]:
    command = [sys.executable, "-m", "rlvr.cli", "eval", "--model", str(model_dir), "--out", str(out)]
    for key, value in study["eval"].items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            command.append(flag)
        elif value not in (False, None):
            command += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return command


def final_checkpoint(run_dir: Path, max_steps: int) -> Path:
    """The checkpoint of the last step: a Hugging Face model folder (rlvr.run.checkpoints)."""
    return run_dir / f"checkpoint-{max_steps}"


def run(command: list[str], log: Path, dry_run: bool) -> None:
    text = shlex.join(["python", *command[1:]])
    print(f"$ {text}", flush=True)
    if dry_run:
        return
    t0 = time.perf_counter()
    result = subprocess.run(command, check=False, cwd=REPO)
    seconds = time.perf_counter() - t0
    with log.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"command": text, "seconds": round(seconds, 1), "returncode": result.returncode,
                             "finished": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    if result.returncode != 0:
        raise SystemExit(f"command failed ({result.returncode}): {text}")


def run_study(study_path: Path, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"run the study {study_path.name} (resumable)")
    parser.add_argument("--scale", help="a scale from the study's `scales` (e.g. gpu); default: the CPU study")
    parser.add_argument("--arms", help="comma-separated arms (default: all)")
    parser.add_argument("--seeds", help="comma-separated seeds (default: the study's)")
    parser.add_argument("--skip-eval", action="store_true", help="train only")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    study = load_study(study_path, args.scale)
    arms = args.arms.split(",") if args.arms else list(study["arms"])
    unknown = [a for a in arms if a not in study["arms"]]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; the study has {list(study['arms'])}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(study["seeds"])
    out = RESULTS / study["name"]
    (REPO / out).mkdir(parents=True, exist_ok=True)
    log = REPO / out / "commands.log"
    max_steps = int(study["common"]["max_steps"])
    base_eval = out / "base" / "eval.json"  # the untrained model, for reference
    if not args.skip_eval and not (REPO / base_eval).exists():
        (REPO / base_eval).parent.mkdir(parents=True, exist_ok=True)
        run(eval_command(study, study["common"]["model"], base_eval), log, args.dry_run)
    for seed in seeds:  # seed-major: a partly done study has whole seeds of every arm first
        for arm in arms:
            run_dir = out / arm / f"seed{seed}"
            final = final_checkpoint(run_dir, max_steps)
            if not (REPO / final).exists():
                command = train_command(study, arm, seed, run_dir)
                if (REPO / run_dir).exists():  # continue from its checkpoint, or, when a fresh clone has
                    resumable = any((REPO / run_dir).glob("checkpoint-*"))  # only the logs,
                    command.append("resume=true" if resumable else "overwrite_output_dir=true")  # start over
                run(command, log, args.dry_run)
            evaluation = run_dir / "eval.json"
            if not args.skip_eval and not (REPO / evaluation).exists():
                run(eval_command(study, final, evaluation), log, args.dry_run)
    if not args.dry_run:
        from summarize import summarize_study

        summarize_study(REPO / out, study)
        runs = [out / arm / f"seed{seed}" for arm in study["arms"] for seed in study["seeds"]
                if (REPO / out / arm / f"seed{seed}" / "metrics.jsonl").exists()]
        if runs:
            names = ",".join(f"{r.parent.name}/{r.name}" for r in runs)
            evals = [a for r in runs if (REPO / r / "eval.json").exists() for a in ("--eval", str(r / "eval.json"))]
            if (REPO / out / "base" / "eval.json").exists():
                evals = ["--eval", f"base={out / 'base' / 'eval.json'}", *evals]
            # one line per arm (mean over seeds, min-max band), curves as trailing means over 5 steps
            run([sys.executable, "-m", "rlvr.cli", "report", *map(str, runs), "--names", names,
                 "--out", str(out / "report"), *evals, "--group-seeds", "--smooth", str(REPORT_SMOOTHING)],
                log, False)
    return 0
