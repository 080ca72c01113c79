"""The published studies trace back to committed files and committed commands.

docs/results.md promises that every number in it is read from a file under experiments/results/
produced by a committed command. These tests hold the repository to it:
- each study's summary.md is exactly what experiments/summarize.py makes from the committed run
  files (metrics.jsonl, eval.json, commands.log), so no number in it was typed by hand;
- every run's metrics.jsonl was made by the command the study script builds from the committed
  YAML (the command is in commands.log, and the run's config.yaml holds the same options);
- every number with one to three decimals in docs/results.md appears in a summary.md;
- the held-out problems are not training problems;
- the page's reading of the DaGRPO masking arm (a run equals GRPO's until a contrast pair is masked).
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

from tests.helpers.metrics import comparable

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
        if path.name in ("metrics.jsonl", "eval.json", "commands.log", "config.yaml"):
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
    out = Path("experiments") / "results" / name  # the commands name run folders relative to the repo root
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
            variants = (command, f"{command} resume=true", f"{command} overwrite_output_dir=true")
            assert any(v in done for v in variants), f"{run_dir}: its command is not in commands.log"
        # the run's own record of its options agrees with the study's YAML
        config = yaml.safe_load((metrics.parent / "config.yaml").read_text())
        flat = {key: value for section in config.values() if isinstance(section, dict) for key, value in section.items()}
        for key, value in {**study["common"], **(study["arms"][arm] or {}), "seed": seed}.items():
            assert str(flat[key]) == str(value), f"{run_dir}/config.yaml: {key}={flat[key]!r}, the study says {value!r}"
        if (metrics.parent / "eval.json").exists():
            steps = int(study["common"]["max_steps"])
            # studies run before the checkpoint-N layout evaluated checkpoints/step-NNNNNN/model
            models = (study_module.final_checkpoint(run_dir, steps), run_dir / "checkpoints" / f"step-{steps:06d}" / "model")
            evaluations = [" ".join(["python", *study_module.eval_command(study, m, run_dir / "eval.json")[1:]])
                           for m in models]
            assert any(e in done for e in evaluations), f"{run_dir}/eval.json: its command is not in commands.log"


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


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _same_step(a: dict, b: dict) -> bool:
    shared = [k for k in comparable(a).keys() & comparable(b).keys()]  # not timings
    return all(a[k] == b[k] for k in shared)


def test_masking_changes_a_run_only_where_it_removes_a_contrast_pair():
    """docs/results.md: pair masking changes GRPO's gradient only through pairs with different rewards.

    For each seed, dagrpo_sgr's run equals grpo's (same rollouts, losses, grad norms, every other shared
    metric) up to the first step where `dagrpo/masked_contrast_frac` > 0, and differs from that step on;
    a run with no such step ends with the same evaluation responses as grpo's.
    """
    folder = RESULTS / "dagrpo"
    seeds = [p.name for p in (folder / "dagrpo_sgr").glob("seed*") if (folder / "grpo" / p.name).exists()]
    assert len(seeds) >= 2
    for seed in seeds:
        sgr, grpo = _metrics(folder / "dagrpo_sgr" / seed), _metrics(folder / "grpo" / seed)
        first = next((i for i, m in enumerate(sgr) if m["dagrpo/masked_contrast_frac"] > 0), None)
        for i, (a, b) in enumerate(zip(sgr, grpo, strict=True)):
            if first is None or i < first:
                assert _same_step(a, b), (seed, a["step"])
        if first is None:
            responses = [(folder / arm / seed / "eval.json.samples.jsonl").read_text() for arm in ("dagrpo_sgr", "grpo")]
            assert responses[0] == responses[1], seed
        else:  # the update at that step differs, so the next steps do
            assert sgr[first]["train/grad_norm"] != grpo[first]["train/grad_norm"], seed


def test_per_seed_column_is_in_numeric_seed_order():
    from summarize import markdown

    entry = lambda seeds: {"seeds": sorted(seeds), "mean": {"eval/d/pass@1": 0.5}, "min": {"eval/d/pass@1": 0.1},
                           "max": {"eval/d/pass@1": 0.9},
                           "per_seed": {s: {"eval/d/pass@1": v} for s, v in seeds.items()}}
    text = markdown({"a": entry({"seed10": 0.9, "seed2": 0.1}), "b": entry({"seed2": 0.2, "seed3": 0.3})})
    assert "| pass@1 | pass@1 of seeds 2, 3, 10 |" in text
    assert "| a | 0.500 [0.100, 0.900] | 0.100, –, 0.900 |" in text
    assert "| b | 0.500 [0.100, 0.900] | 0.200, 0.300, – |" in text


def test_policy_reward_puts_back_the_response_an_anchor_replaced():
    from summarize import policy_reward
    cfg = {"prompts_per_step": 4, "num_generations": 8, "anchors": "failed", "anchor_max_correct": 0,
           "anchor_placement": "replace_worst", "reward_funcs": ["accuracy"]}
    # 2 of 4 groups all wrong got an anchor each: logged 6 right of the 30 remaining = 0.2;
    # the 2 replaced responses were wrong, so the policy's reward is 6 / 32 = 0.1875 exactly
    step = {"rollout/reward_mean": 0.2, "dagrpo/anchor_rate": 0.5, "rollout/num_gen_batches": 1}
    assert policy_reward(step, cfg) == (pytest.approx(0.1875), None)
    # anchors in every group: a replaced response may have been right where the rest of its group
    # was (1 such group here): between 6/32 and 7/32
    step_always = {**step, "dagrpo/anchor_rate": 1.0, "rollout/reward_mean": 6 / 28, "rollout/frac_all_correct": 0.25}
    low, high = policy_reward(step_always, {**cfg, "anchors": "always"})
    assert (low, high) == (pytest.approx(6 / 32), pytest.approx(7 / 32))
    # logged by the fixed code (it has dagrpo/anchor_reward_mean), or no anchor: as logged
    assert policy_reward({**step, "dagrpo/anchor_reward_mean": 1.0}, cfg) == (0.2, None)
    assert policy_reward({**step, "dagrpo/anchor_rate": 0.0}, cfg) == (0.2, None)
