"""report.md and the CLI: summary numbers, differing settings, images, skipped panels, command."""

import argparse
import re

import pytest

from rlvr.cli import main
from rlvr.report import make_report
from rlvr.report_cli import add_report_parser, run_report
from tests.helpers.hostile_names import files_under, hostile_names

from .conftest import GRPO_RECORDS, PNG_HEADER, base_config, eval_result, write_run


def report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_report_parser(parser.add_subparsers(dest="command"))
    return run_report(parser.parse_args(["report", *argv]))


def _row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_report_md_summarises_each_run(runs, base_eval, tmp_path):
    out = tmp_path / "report"
    argv = [str(runs["grpo"]), str(runs["dagrpo"]), str(runs["tagrpo"]), "--out", str(out),
            "--eval", str(base_eval), "--names", "G,D,T"]
    assert report(argv) == 0
    text = (out / "report.md").read_text()
    assert "rlvr report " + " ".join(argv) in text  # the command line, in order
    header = _row(text, "run")
    grpo = dict(zip(header, _row(text, "G")))
    # 4 steps → k = 2: (0.1 + 0.2) / 2 = 0.15 → (0.4 + 0.5) / 2 = 0.45
    assert grpo["reward first k → last k"] == "0.150 → 0.450 (k=2)"
    assert grpo["algo"] == "grpo" and grpo["steps"] == "4"
    assert grpo["final uniform frac"] == "0.250"
    assert grpo["mean step s"] == "4.60"  # (3.6 + 5.6 + 4.6 + 4.6) / 4
    assert grpo["total min"] == "0.31"  # 18.4 s
    assert grpo["grad-norm spikes"] == "1"
    assert grpo["best gsm8k-100"] == "pass@1 0.300, pass@16 0.700"
    tagrpo = dict(zip(header, _row(text, "T")))
    assert tagrpo["final uniform frac"] == "0.250 pooled / 0.600 per-variant"
    assert tagrpo["best gsm8k-100"] == "—"
    # settings that differ, one column per run; output_dir always differs and is left out
    assert _row(text, "algorithm.algo") == ["algorithm.algo", "grpo", "dagrpo", "tagrpo"]
    assert _row(text, "algorithm.beta") == ["algorithm.beta", "0", "0.04", "0"]
    assert _row(text, "dagrpo.pair_masking") == ["dagrpo.pair_masking", "False", "True", "False"]
    assert _row(text, "tagrpo.num_rephrasings") == ["tagrpo.num_rephrasings", "0", "0", "4"]
    assert "run.output_dir" not in text and "optim.learning_rate" not in text
    images = re.findall(r"!\[(\w+)\]\(([\w.]+)\)", text)
    assert len(images) == 12
    for _, file in images:
        assert (out / file).read_bytes()[:8] == PNG_HEADER
    assert "| base | math500 | 100 | 0.2 |" in text  # eval table: pass@1 of the extra file


def test_skipped_panels_are_listed_and_default_out_is_first_run(runs):
    assert report([str(runs["tagrpo"])]) == 0
    text = (runs["tagrpo"] / "report" / "report.md").read_text()
    skipped = re.search(r"Skipped \(no run has their data\): (.*)\.", text).group(1)
    assert skipped.split(", ") == ["`response_length`", "`entropy`", "`kl`", "`loss`", "`masked_pairs`",
                                   "`anchor_rate`", "`eval_during_training`", "`pass_at_k`"]
    assert "![kl]" not in text and "![reward](reward.png)" in text
    assert "One run" in text


def test_cli_errors_exit_2_with_the_fix(tmp_path, capsys, runs):
    (tmp_path / "not_a_run").mkdir()
    assert report([str(tmp_path / "not_a_run")]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    assert report([str(runs["grpo"]), "--names", "a,b"]) == 2
    assert "2 names for 1 run directories" in capsys.readouterr().err


def test_report_of_a_real_tiny_random_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    run = tmp_path / "grpo"
    assert main(["train", "model=tiny-random", "data=rg:basic_arithmetic:size=16", "max_steps=3",
                 f"output_dir={run}", "progress_bar=false", "prompts_per_step=2", "num_generations=4",
                 "max_completion_length=12", "verifier_workers=1"]) == 0
    assert report([str(run)]) == 0
    text = (run / "report" / "report.md").read_text()
    assert dict(zip(_row(text, "run"), _row(text, "grpo")))["steps"] == "3"
    for file in ("reward.png", "uniform_groups.png", "grad_norm.png", "response_length.png", "entropy.png",
                 "time.png"):
        data = (run / "report" / file).read_bytes()
        assert data[:8] == PNG_HEADER and len(data) > 10_000, file
        assert f"]({file})" in text
    assert "`kl`" in text  # beta = 0: no KL logged, the panel is skipped


@pytest.mark.filterwarnings("ignore:Glyph 0:UserWarning", "ignore:Tight layout not applied:UserWarning")
def test_hostile_run_and_benchmark_names_never_become_paths(tmp_path):
    names = hostile_names(tmp_path)
    evals = {f"e{i}.json": eval_result(name, {"1": 0.5}, spec=name) for i, name in enumerate(names)}
    run = write_run(tmp_path, "run", GRPO_RECORDS, base_config("grpo", tmp_path / "run"), evals=evals)
    before = files_under(tmp_path)
    path = make_report([run], tmp_path / "rep", names=["../../escaped-run"])
    text = path.read_text()
    assert all(f"| {name} |" in text for name in ("../../etc/passwd", "x" * 200))  # the names are shown
    new = files_under(tmp_path) - before
    assert new and all(file.startswith("rep/") for file in new), new
