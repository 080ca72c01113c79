"""verl's ``prime_code.compute_score`` (its own files, its local executor) beside rlvr's sandboxed ``verl_code``, on
the same safe programs: the same numbers. verl's package ``__init__`` needs ray, so prime_code is loaded from its
folder as a package of its own."""

from __future__ import annotations

import json

import pytest

from rlvr.rewards import resolve_reward
from rlvr.rewards.verl_code import load_verl_prime_code

STDIN_TESTS = {"inputs": ["1 2\n", "5 5\n", "0 0\n", "10 -3\n"], "outputs": ["3\n", "10\n", "0\n", "7\n"]}
# call-based rows: each input is JSON arguments one per line, each output JSON (verl's run_test reads them so)
CALL_TESTS = {"fn_name": "add", "inputs": ["1\n2", "5\n5", "2\n2"], "outputs": ["3", "10", "4"]}
PROGRAMS = {  # name -> (completion, tests)
    "stdin_right": ("Here:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```", STDIN_TESTS),
    "stdin_half": ("```python\na, b = map(int, input().split())\nprint(a + b if a > 0 else 1)\n```", STDIN_TESTS),
    "stdin_wrong": ("```python\nprint('no')\n```", STDIN_TESTS),
    "stdin_crash": ("```python\nraise ValueError('x')\n```", STDIN_TESTS),
    "no_fence": ("a, b = map(int, input().split())\nprint(a * b)\n", STDIN_TESTS),
    "call_right": ("```python\ndef add(a, b):\n    return a + b\n```", CALL_TESTS),
    "call_one_wrong": ("```python\ndef add(a, b):\n    return a + b if a != 2 else 0\n```", CALL_TESTS),
    "bad_ground_truth": ("```python\nprint(1)\n```", "not json"),
}


@pytest.fixture(scope="module")
def prime_code():
    return load_verl_prime_code()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_verl_code_gives_prime_codes_numbers(prime_code, name):
    completion, tests = PROGRAMS[name]
    ground_truth = tests if isinstance(tests, str) else json.dumps(tests)
    verl_score = float(prime_code.compute_score(completion, ground_truth, continuous=True)[0])  # default_compute_score
    reward = resolve_reward("verl_code")
    ours = reward(completions=[completion], data_source=["apps"], reward_model=[{"ground_truth": ground_truth}])
    assert ours == [verl_score]


def test_the_expected_numbers_are_not_all_alike(prime_code):
    """So the comparison above can fail: the programs span 0, a fraction and 1 under verl's own code."""
    scores = {name: float(prime_code.compute_score(c, t if isinstance(t, str) else json.dumps(t), continuous=True)[0])
              for name, (c, t) in PROGRAMS.items()}
    assert scores["stdin_right"] == 1.0 and scores["stdin_wrong"] == 0.0 and scores["stdin_half"] == 0.75
    # prime_code's one-by-one pass drops fn_name, so a call-based program with one wrong case scores 0: kept
    assert scores["call_right"] == 1.0 and scores["call_one_wrong"] == 0.0


def test_other_data_sources_are_not_scored():
    reward = resolve_reward("verl_code")
    assert reward(completions=["x"], data_source=["openai/gsm8k"], reward_model=[{"ground_truth": "4"}]) == [None]
