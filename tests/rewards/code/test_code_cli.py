"""The code rewards through the real CLI: `rlvr train` on the built-in code tasks and on open-r1/verl rows from
files, `rlvr eval` on HumanEval, and the start-up refusal where the sandbox cannot isolate."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.cli import main
from rlvr.data import load_rows
from rlvr.eval import runner
from rlvr.eval_cli import add_eval_parser, run_eval
from rlvr.rewards import resolve_reward
from rlvr.rewards.sandbox import pool as pool_module


def _train(output_dir: Path, **extra) -> list[str]:
    options = {"model": "tiny-random", "max_steps": 2, "prompts_per_step": 2, "num_generations": 2,
               "max_completion_length": 8, "output_dir": output_dir, "progress_bar": "false", **extra}
    return ["train", *(f"{key}={value}" for key, value in options.items())]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_train_on_the_builtin_code_tasks_runs_offline(tmp_path):
    assert main(_train(tmp_path / "run", data="code-tasks", reward_funcs="code")) == 0
    metrics = _metrics(tmp_path / "run")
    assert len(metrics) == 2 and all(m["rewards/code_reward/errors"] == 0.0 for m in metrics)
    assert all("rewards/code_reward_mean" in m for m in metrics)


def test_train_on_open_r1_rows_from_a_file_runs_their_tests(tmp_path):
    # tiny-random writes no ```python block, so open-r1's extraction gives the empty program, whose output is
    # "": it passes the cases expecting "" and fails the others. Rewards of 1.0 mean the program really ran.
    rows = [{"prompt": f"task {i}", "verification_info": {"language": "python", "test_cases": [
        {"input": "", "output": "" if i % 2 == 0 else "42", "type": "stdin_stdout"}]}} for i in range(4)]
    data = tmp_path / "open_r1.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(_train(tmp_path / "run", data=data, reward_funcs="binary_code", shuffle="false",
                       prompts_per_step=4)) == 0
    metrics = _metrics(tmp_path / "run")
    assert [m["rewards/binary_code_reward_mean"] for m in metrics] == [0.5, 0.5]
    for m in metrics:  # each completion ran one case: its outcome counted, and its missing code block
        tests = {key.rsplit("/", 1)[1]: m[key] for key in m if key.startswith("rewards/binary_code_reward/tests/")}
        assert tests["passed"] == tests["wrong_answer"] == m["rewards/binary_code_reward/no_code"] / 2 > 0
        assert sum(tests.values()) == m["rewards/binary_code_reward/no_code"]


def test_verl_code_rows_from_parquet(tmp_path):
    ground_truth = json.dumps({"inputs": ["2 3\n"], "outputs": ["5\n"]})
    table = pa.Table.from_pylist([{"data_source": "codecontests", "prompt": [{"role": "user", "content": "add"}],
                                   "reward_model": {"style": "rule", "ground_truth": ground_truth}}])
    pq.write_table(table, tmp_path / "verl.parquet")
    row = load_rows(str(tmp_path / "verl.parquet"))[0]
    reward = resolve_reward("verl_code")
    right = "```python\nprint(sum(map(int, input().split())))\n```"
    assert reward([right, "```python\nprint(6)\n```"], data_source=[row["data_source"]] * 2,
                  reward_model=[row["reward_model"]] * 2) == [1.0, 0.0]


def test_eval_on_humaneval_scores_each_response_in_the_sandbox(tmp_path, monkeypatch):
    canonical = {row["prompt"]: row["canonical_solution"] for row in load_rows("humaneval")[:3]}
    texts = iter([canonical[p] for p in list(canonical) for _ in range(2)])  # the model "writes" the solutions

    def fake_texts(self, prompts, seeds, sampling):
        return [next(texts) for _ in prompts]

    monkeypatch.setattr(runner._ChunkEvaluator, "_texts", fake_texts)
    parser = argparse.ArgumentParser(prog="rlvr")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "he.json"
    args = ["eval", "--model", "tiny-random", "--data", "humaneval", "--limit", "3", "--n", "2", "--k", "1,2",
            "--max_completion_length", "8", "--no-progress", "--out", str(out)]
    assert run_eval(parser.parse_args(args)) == 0
    assert json.loads(out.read_text())["datasets"]["humaneval"]["pass@k"] == {"1": 1.0, "2": 1.0}


def test_train_stops_at_start_when_the_sandbox_cannot_isolate(tmp_path, monkeypatch, capsys):
    refusing = tmp_path / "worker.py"
    refusing.write_text("import sys\nsys.stderr.write('SETUP-FAILED unshare(user, mount, network namespaces): "
                        "Operation not permitted\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(pool_module, "WORKER_FILE", refusing)
    monkeypatch.setattr(pool_module, "_SHARED", {})
    assert main([*_train(tmp_path / "run", data="code-tasks", reward_funcs="code"), "--dry-run"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert any("Operation not permitted" in line and "code_sandbox=limits_only" in line for line in error)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("value", ["docker", "none"])
def test_a_bad_code_sandbox_value_is_refused(tmp_path, capsys, value):
    assert main([*_train(tmp_path / "run", data="code-tasks", reward_funcs="code", code_sandbox=value),
                 "--dry-run"]) == 2
    assert "code_sandbox" in capsys.readouterr().err
