"""Scoring code problems in ``rlvr eval``: each response's program run on the problem's tests in the sandbox.

A dataset is a code dataset when its rows carry HumanEval's ``test`` and ``entry_point`` (scored by
``code_check``: the tests ran to their end) or open-r1's ``verification_info`` (scored by ``binary_code``:
every case passed); a response is correct when that reward is 1.0, and pass@k follows as for math.

Convention: a sandbox failure (the worker, not the program) is an incorrect response with ``error`` set.
"""

from __future__ import annotations

from rlvr.rewards import CodeSettings, VerifyResult, bind_code_settings


def code_reward_name(rows: list[dict]) -> str | None:
    """``code_check`` or ``binary_code`` when every row has that reward's columns, else None (a math dataset)."""
    if rows and all("test" in row and "entry_point" in row for row in rows):
        return "code_check"
    if rows and all("verification_info" in row for row in rows):
        return "binary_code"
    return None


def score_code(rows: list[dict], texts: list[str], per_row: int, *, sandbox: str) -> list[VerifyResult]:
    """One result per text; texts[i] answers rows[i // per_row] (the samples), then one per row (greedy) if more."""
    name = code_reward_name(rows)
    reward = bind_code_settings(name, CodeSettings(sandbox=sandbox))
    owners = [rows[i // per_row] if i < len(rows) * per_row else rows[i - len(rows) * per_row]
              for i in range(len(texts))]
    columns = {column: [row.get(column) for row in owners] for column in reward.required_columns}
    if name == "code_check":
        columns["code_prompt"] = [row.get("code_prompt", "") for row in owners]
    values = reward(completions=texts, **columns)
    return [VerifyResult(correct=value == 1.0, error=None if value is not None else "not scored (a sandbox failure, or "
                         "a language other than python)") for value in values]
