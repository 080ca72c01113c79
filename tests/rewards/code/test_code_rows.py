"""Code rows checked when the data loads (rlvr.rewards.code_rows): a row whose tests are missing, empty, not JSON
or malformed is refused by the dry run and the run alike, in one line naming the row and the column (it was a
traceback advising to "fix the function", or every completion silently scoring 0.0); and a built-in reward that
fails at run time never tells the user to fix a function they did not write."""

from __future__ import annotations

import copy
import json

import pytest

from rlvr.cli import main
from rlvr.train.rewarding import Rewarder, RewardFunctionFailed

GOOD = {"language": "python", "test_cases": [{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"}]}
TRUTH = {"inputs": ["1 2\n"], "outputs": ["3\n"]}


def _rows(column: str, value, *, broken: int = 2, n: int = 3) -> list[dict]:
    rows = [{"prompt": f"task {i}", column: copy.deepcopy(value)} for i in range(n)]
    return rows, rows[broken]


def _open_r1(mutate) -> list[dict]:
    rows, broken = _rows("verification_info", GOOD)
    mutate(broken)
    return rows


def _verl(mutate) -> list[dict]:
    rows = [{"prompt": f"task {i}", "data_source": "apps", "reward_model": {"ground_truth": json.dumps(TRUTH)}}
            for i in range(3)]
    mutate(rows[2])
    return rows


CASES = {
    "a case without output": ("code", _open_r1(lambda r: r["verification_info"]["test_cases"][0].pop("output")),
                              "column verification_info: test case 0 lacks 'output'"),
    "not JSON": ("binary_code", _open_r1(lambda r: r.update(verification_info="{language: python")),
                 "column verification_info: not valid JSON"),
    "no test cases": ("code", _open_r1(lambda r: r["verification_info"].update(test_cases=[])),
                      "column verification_info: `test_cases` is empty, so no program could pass"),
    "a number as output": ("code", _open_r1(lambda r: r["verification_info"]["test_cases"][0].update(output=3)),
                           "column verification_info: test case 0's 'output' is a int, not a string"),
    "an empty HumanEval test": ("code_check", [{"prompt": "p", "test": "def check(c): pass", "entry_point": "f"},
                                               {"prompt": "p", "test": "def check(c): pass", "entry_point": "f"},
                                               {"prompt": "p", "test": "", "entry_point": "f"}],
                                "column test: '' is not the test code defining check(candidate)"),
    "a verl ground truth not JSON": ("verl_code", _verl(lambda r: r["reward_model"].update(ground_truth="[1, 2")),
                                     "column reward_model['ground_truth']: not valid JSON"),
    "verl inputs without outputs": ("verl_code", _verl(lambda r: r["reward_model"].update(
        ground_truth=json.dumps({"inputs": ["1"], "outputs": []}))),
        "column reward_model['ground_truth']: 1 inputs and 0 outputs"),
}


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_code_row_is_refused_naming_the_row_and_column(tmp_path, capsys, case, dry_run):
    reward, rows, expected = CASES[case]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    argv = ["train", "model=tiny-random", f"data={data}", f"reward_funcs={reward}", "max_steps=1",
            "prompts_per_step=1", "num_generations=2", "max_completion_length=4", "progress_bar=false",
            f"output_dir={tmp_path / 'run'}", *(["--dry-run"] if dry_run else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"rlvr train: reward function {reward}")
    assert f"row 2 (id 'rows.jsonl#2'), {expected}" in err
    assert "fix the function" not in err.lower()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step


def test_well_formed_rows_and_other_languages_pass_the_check():
    from rlvr.rewards.code_rows import check_verification_info

    other = {"language": "cpp", "test_cases": []}  # scored None, not refused
    check_verification_info([{"verification_info": GOOD}, {"verification_info": json.dumps(GOOD)},
                             {"verification_info": other}])


def test_a_built_in_reward_failing_at_run_time_points_at_the_data_not_a_function(tmp_path):
    """The rows pass the load-time check but the reward still fails every call (here: the column arrives as None):
    the stop names the cause and the data, never "fix the function"; a user's function still gets that advice."""
    rewarder = Rewarder(["code", users_reward], None, verifier_workers=1,
                        verifier_timeout=5, answer_extraction="boxed")
    try:
        for name, cause in zip(rewarder.names, ("ValueError: no verification_info", "TypeError: oops")):
            rewarder.last_failure[name] = cause
        stats = {"rewards/calls": 4.0, **{f"rewards/{name}/errors": 4.0 for name in rewarder.names}}
        with pytest.raises(RewardFunctionFailed) as caught:
            rewarder.check_failures(1, stats)
        assert "code_reward" in str(caught.value) and "rlvr's built-in reward" in str(caught.value)
        assert "Fix the function" not in str(caught.value)
        rewarder.funcs, rewarder.names = rewarder.funcs[1:], rewarder.names[1:]
        rewarder._window.clear()
        with pytest.raises(RewardFunctionFailed, match="Fix the function"):
            rewarder.check_failures(1, stats)
    finally:
        rewarder.close()


def users_reward(completions, **kwargs):
    return [0.0] * len(completions)
