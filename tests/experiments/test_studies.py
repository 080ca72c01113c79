"""The published studies trace back to committed files and committed commands.

docs/results.md promises that every number in it is read from a file under experiments/results/
produced by a committed command. These tests hold the repository to it:
- each study's summary.md is exactly what experiments/summarize.py makes from the committed run
  files (metrics.jsonl, eval.json, commands.log), so no number in it was typed by hand;
- every run's metrics.jsonl was made by the command the study script builds from the committed
  YAML (the command is in commands.log, and the run's config.yaml holds the same options);
- every number with one to three decimals in docs/results.md appears in a summary.md;
- the held-out problems are not training problems.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO / "experiments"
RESULTS = EXPERIMENTS / "results"
sys.path.insert(0, str(EXPERIMENTS))

import study as study_module
from summarize import summarize_study

STUDIES = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml"))
PUBLISHED = [name for name in STUDIES if (RESULTS / name / "summary.md").exists()]
# earlier runs kept as evidence (experiments/results/archive/README.md): <study>-<label>
ARCHIVED = sorted(p.name for p in (RESULTS / "archive").glob("*") if (p / "summary.md").exists())
# numbers in docs/results.md that are options of the studies (experiments/*.yaml), not results
CONFIG_NUMBERS = {"0.95"}  # top-p of `rlvr eval`


def _study(name: str) -> dict:
    return study_module.load_study(EXPERIMENTS / f"{name}.yaml", None)


def test_both_studies_are_published():
    assert {"dagrpo", "tagrpo"} <= set(PUBLISHED)


@pytest.mark.parametrize("name", PUBLISHED + [f"archive/{a}" for a in ARCHIVED])
def test_summary_is_made_from_the_committed_run_files(name, tmp_path):
    source = RESULTS / name
    copy = tmp_path / name
    for path in source.rglob("*"):
        if path.name in ("metrics.jsonl", "eval.json", "commands.log"):
            target = copy / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    summarize_study(copy, _study(name.removeprefix("archive/").split("-")[0]))
    assert (copy / "summary.md").read_text() == (source / "summary.md").read_text(), (
        f"experiments/results/{name}/summary.md is not what `python experiments/summarize.py "
        f"experiments/results/{name}` makes from the committed files; re-run it and commit the result")


@pytest.mark.parametrize("name", PUBLISHED)
def test_every_run_was_made_by_the_committed_command(name):
    study = _study(name)
    out = Path("experiments") / "results" / name
    logged = [json.loads(line) for line in (RESULTS / name / "commands.log").read_text().splitlines() if line]
    done = {entry["command"] for entry in logged if entry["returncode"] == 0}
    runs = sorted((RESULTS / name).glob("*/seed*/metrics.jsonl"))
    assert runs, f"no runs under experiments/results/{name}"
    for metrics in runs:
        arm, seed = metrics.parent.parent.name, int(metrics.parent.name.removeprefix("seed"))
        assert arm in study["arms"], f"{metrics}: arm {arm!r} is not in experiments/{name}.yaml"
        run_dir = out / arm / f"seed{seed}"
        command = " ".join(["python", *study_module.train_command(study, arm, seed, run_dir)[1:]])
        finished = len(metrics.read_text().splitlines()) == int(study["common"]["max_steps"])
        if finished:  # an interrupted run's command is logged when it completes (summary.md lists it)
            assert command in done or f"{command} resume=true" in done, f"{run_dir}: its command is not in commands.log"
        # the run's own record of its options agrees with the study's YAML
        config = yaml.safe_load((metrics.parent / "config.yaml").read_text())
        flat = {key: value for section in config.values() if isinstance(section, dict) for key, value in section.items()}
        for key, value in {**study["common"], **(study["arms"][arm] or {}), "seed": seed}.items():
            assert str(flat[key]) == str(value), f"{run_dir}/config.yaml: {key}={flat[key]!r}, the study says {value!r}"
        if (metrics.parent / "eval.json").exists():
            model = study_module.final_checkpoint(run_dir, int(study["common"]["max_steps"])) / "model"
            evaluation = " ".join(["python", *study_module.eval_command(study, model, run_dir / "eval.json")[1:]])
            assert evaluation in done, f"{run_dir}/eval.json: its command is not in commands.log"


def test_every_number_in_the_results_page_is_in_a_summary():
    page = (REPO / "docs" / "results.md").read_text()
    sources = [RESULTS / name / "summary.md" for name in PUBLISHED]
    sources += [path for a in ARCHIVED for path in (RESULTS / "archive" / a).glob("*.md")]
    sources += [path for name in PUBLISHED for path in (RESULTS / name).glob("unevaluated.md")]
    summaries = "".join(path.read_text() for path in sources)
    for path in (RESULTS / "archive").glob("*/*/seed*/eval-*.json"):  # re-evaluations of archived runs
        for dataset in json.loads(path.read_text())["datasets"].values():
            summaries += " ".join(f"{v:.3f}" for v in dataset["pass@k"].values())
    numbers = set(re.findall(r"(?<![\d.])\d+\.\d{1,3}(?!\d)", page))
    assert len(numbers) > 20  # the page has its tables
    untraced = sorted(n for n in numbers - CONFIG_NUMBERS if n not in summaries)
    assert not untraced, f"docs/results.md has numbers no summary.md holds: {untraced}"


def test_heldout_problems_are_not_training_problems():
    from rlvr.data import load_rows

    heldout = [json.loads(line) for line in (EXPERIMENTS / "data" / "chain_sum_heldout.jsonl").read_text().splitlines()]
    assert len(heldout) >= 32
    for name in STUDIES:
        training = {row["prompt"] for row in load_rows(_study(name)["common"]["data"])}
        assert len(training) > 100
        assert not [row["id"] for row in heldout if row["prompt"] in training]


def test_a_run_that_has_just_started_is_listed_as_unfinished(tmp_path):
    """A lane that has created a run folder but logged no step yet must not break the summary."""
    source = RESULTS / "dagrpo" / "grpo" / "seed0"
    finished = tmp_path / "grpo" / "seed0"
    finished.mkdir(parents=True)
    for name in ("metrics.jsonl", "eval.json"):
        shutil.copy(source / name, finished / name)
    started = tmp_path / "dagrpo" / "seed0"
    started.mkdir(parents=True)
    (started / "metrics.jsonl").write_text("")
    summary = summarize_study(tmp_path, _study("dagrpo"))
    assert list(summary) == ["grpo"]
    assert "dagrpo/seed0 (0 steps)" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("name", [n for n in PUBLISHED if (RESULTS / n / "unevaluated.md").exists()])
def test_reward_hack_counts_are_made_from_the_committed_responses(name, tmp_path):
    """unevaluated.md (cited in docs/results.md) is what find_unevaluated.py reads in the committed responses."""
    from find_unevaluated import main as count_unevaluated

    source = RESULTS / name
    for path in source.rglob("*"):
        if path.name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "eval.json.samples.jsonl"):
            target = tmp_path / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    assert count_unevaluated(tmp_path) == (source / "unevaluated.md").read_text(), (
        f"re-run `python experiments/find_unevaluated.py experiments/results/{name}` and commit the result")
