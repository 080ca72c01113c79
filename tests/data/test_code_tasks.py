"""The built-in code sources: HumanEval's canonical solutions and code-tasks' references score 1.0 through the path
`rlvr eval` scores with (rlvr.eval.code_scoring), in the sandbox; wrong programs do not."""

from __future__ import annotations

from rlvr.data import load_rows
from rlvr.data.code_tasks import CODE_TASKS_SIZE, HUMANEVAL_SIZE
from rlvr.eval.code_scoring import code_reward_name, score_code


def test_all_164_humaneval_canonical_solutions_pass():
    rows = load_rows("humaneval")
    assert len(rows) == HUMANEVAL_SIZE and rows[0]["id"] == "humaneval:HumanEval/0"
    assert code_reward_name(rows) == "code_check"
    results = score_code(rows, [row["canonical_solution"] for row in rows], 1, sandbox="namespaces")
    failed = [row["id"] for row, result in zip(rows, results) if not result.correct]
    assert failed == []


def test_a_wrong_humaneval_solution_fails():
    rows = load_rows("humaneval")[:4]
    results = score_code(rows, ["    return None\n"] * 4, 1, sandbox="namespaces")
    assert [result.correct for result in results] == [False] * 4


def test_code_tasks_references_pass_and_are_seeded():
    rows = load_rows("code-tasks")
    assert len(rows) == CODE_TASKS_SIZE and rows == load_rows("code-tasks")
    assert code_reward_name(rows) == "binary_code"
    fenced = [f"```python\n{row['answer']}```" for row in rows]
    assert all(result.correct for result in score_code(rows, fenced, 1, sandbox="namespaces"))
    assert not any(r.correct for r in score_code(rows, ["```python\nprint(0)\n```"] * len(rows), 1,
                                                   sandbox="namespaces"))
