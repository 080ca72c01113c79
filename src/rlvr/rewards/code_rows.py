"""The tests a code reward reads, checked row by row when the data loads (``check_rows`` of each code reward,
called by set-up and ``--dry-run`` through rlvr.train.setup.check_reward_functions): a row whose tests are
missing, empty or malformed would score every completion 0.0, or raise at the first step with advice about the
function when the fault is the dataset's. Each problem is a ValueError naming the row, the column and the fix.

- ``verification_info`` (open-r1's ``code`` / ``binary_code``): a dict, or its JSON text, with ``test_cases``, a
  non-empty list of ``{"input": str, "output": str}``; rows in another language than python are passed over
  (they score None);
- ``test`` / ``entry_point`` (``code_check``, HumanEval's rows): non-empty strings;
- ``reward_model["ground_truth"]`` (``verl_code``, on verl's code data sources only): a dict, or its JSON text,
  with lists ``inputs`` and ``outputs`` of one length (verl's ``prime_code`` would score 0.0 and print an error).
"""

from __future__ import annotations

import json


def _where(index: int, row: dict, column: str) -> str:
    named = f" (id {row['id']!r})" if row.get("id") not in (None, "") else ""
    return f"row {index}{named}, column {column}"


def _json(value, where: str, shape: str):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as error:
        raise ValueError(f"{where}: not valid JSON ({error}): {value[:80]!r}; the column must hold {shape}") from None


VERIFICATION_INFO = "{'language': 'python', 'test_cases': [{'input': ..., 'output': ...}, ...]} (open-r1's rows)"


def check_verification_info(rows: list[dict]) -> None:
    """Each row's ``verification_info``: test cases present and well formed (module docstring)."""
    for index, row in enumerate(rows):
        where = _where(index, row, "verification_info")
        info = _json(row.get("verification_info"), where, VERIFICATION_INFO)
        if not isinstance(info, dict) or not isinstance(info.get("test_cases"), list):
            raise ValueError(f"{where}: {str(info)[:80]!r} is not {VERIFICATION_INFO}; fix the dataset")
        if info.get("language", "python") != "python":
            continue
        if not info["test_cases"]:
            raise ValueError(f"{where}: `test_cases` is empty, so no program could pass; give the row its tests, or "
                             "drop it from the dataset")
        for number, case in enumerate(info["test_cases"]):
            missing = [key for key in ("input", "output") if not isinstance(case, dict) or key not in case]
            if missing:
                raise ValueError(f"{where}: test case {number} lacks {' and '.join(map(repr, missing))}; each case "
                                 "needs an 'input' and an 'output' string; fix the dataset")
            wrong = [key for key in ("input", "output") if not isinstance(case[key], str)]
            if wrong:
                raise ValueError(f"{where}: test case {number}'s {' and '.join(map(repr, wrong))} is a "
                                 f"{type(case[wrong[0]]).__name__}, not a string (the program's stdin and expected "
                                 "stdout); fix the dataset")


def check_function_tests(rows: list[dict]) -> None:
    """Each row's ``test`` and ``entry_point`` (HumanEval's): non-empty strings."""
    for index, row in enumerate(rows):
        for column, what in (("test", "the test code defining check(candidate)"), ("entry_point", "the function's name")):
            value = row.get(column)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{_where(index, row, column)}: {value!r} is not {what}; fix the dataset")


GROUND_TRUTH = "{'inputs': [...], 'outputs': [...]} test-case JSON (verl's code rows)"


def check_verl_ground_truth(rows: list[dict], sources: tuple[str, ...]) -> None:
    """Each row of verl's code ``sources``: ``reward_model["ground_truth"]`` parses to equal-length case lists."""
    for index, row in enumerate(rows):
        if row.get("data_source") not in sources:
            continue
        where = _where(index, row, "reward_model")
        model = row.get("reward_model")
        if not isinstance(model, dict) or "ground_truth" not in model:
            raise ValueError(f"{where}: {str(model)[:80]!r} has no 'ground_truth'; it must be {{'ground_truth': "
                             f"{GROUND_TRUTH}}}; fix the dataset")
        truth = _json(model["ground_truth"], f"{where}['ground_truth']", GROUND_TRUTH)
        if not (isinstance(truth, dict) and isinstance(truth.get("inputs"), list)
                and isinstance(truth.get("outputs"), list)):
            raise ValueError(f"{where}['ground_truth']: {str(truth)[:80]!r} is not {GROUND_TRUTH}; fix the dataset")
        if not truth["inputs"] or len(truth["inputs"]) != len(truth["outputs"]):
            raise ValueError(f"{where}['ground_truth']: {len(truth['inputs'])} inputs and {len(truth['outputs'])} "
                             "outputs; each test needs one of each (and at least one test); fix the dataset")
