"""Code rewards through the real registry, their programs run in the sandbox: open-r1's values and rules."""

from __future__ import annotations

import json
import signal

import pytest

from rlvr.rewards import CodeSettings, bind_code_settings, resolve_reward
from rlvr.rewards.code_rewards import CodeReward, case_passes, execution_outcome, extract_code, program
from rlvr.rewards.sandbox import Outcome

INFO = {"language": "python", "test_cases": [
    {"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"},
    {"input": "5 5\n", "output": "10", "type": "stdin_stdout"},
]}
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
HALF = "```python\na, b = map(int, input().split())\nprint(3)\n```"


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def test_code_is_the_fraction_of_cases_passed():
    reward = resolve_reward("code", names="trl")
    values = reward([chat(RIGHT), chat(HALF), chat("no code at all"), RIGHT],
                    verification_info=[INFO, json.dumps(INFO), INFO, {**INFO, "language": "cpp"}])
    assert values == [1.0, 0.5, 0.0, None]  # a JSON string is read; rlvr runs python only


def _kinds(outcomes: list[Outcome], expected: str = "3\n") -> list[str]:
    return [execution_outcome(outcome, case_passes(outcome, expected)) for outcome in outcomes]


def test_binary_code_needs_more_than_99_percent():
    reward = resolve_reward("open-r1:binary_code")
    assert reward([RIGHT, HALF], verification_info=[INFO, INFO]) == [1.0, 0.0]
    ok = Outcome(0, None, False, False, False, "3\n", "", 0.1)
    # 99 of 100 cases: 0.99 is not above open-r1's BINARY_THRESHOLD; 100 of 100 is
    for passed, expected in ((99, 0.0), (100, 1.0)):
        kinds = _kinds([ok] * passed + [Outcome(1, None, False, False, False, "", "", 0.1)] * (100 - passed))
        assert CodeReward(binary=True)._score(kinds) == expected
        assert CodeReward()._score(kinds) == passed / 100


@pytest.mark.parametrize("limit", ["wall", "cpu"])
def test_a_timed_out_case_makes_the_completion_zero_as_under_e2b(limit):
    """open-r1's script raises on a case past its 5 s, and E2B's missing result reads 0.0. An endless loop meets
    the CPU limit (SIGXCPU) before the wall limit: it too is a time-out (it counted as one failed case)."""
    late = (Outcome(None, 9, True, False, False, "", "", 10) if limit == "wall"
            else Outcome(None, signal.SIGXCPU, False, False, False, "", "", 5.2))
    assert CodeReward()._score(_kinds([Outcome(0, None, False, False, False, "3\n", "", 0.1), late])) == 0.0


def test_line_comparison_is_open_r1s_zip():
    reward = resolve_reward("code")
    info = {"language": "python", "test_cases": [{"input": "", "output": "1\n2\n3", "type": "stdin_stdout"}]}
    # zip stops at the shorter: "1" alone matches the first expected line (open-r1's comparison, kept)
    assert reward(["```python\nprint(1)\n```", "```python\nprint(' 1 \\n 2')\n```", "```python\nprint(2)\n```"],
                  verification_info=[info] * 3) == [1.0, 1.0, 0.0]


def test_a_crashing_or_exiting_program_fails_its_cases():
    reward = resolve_reward("code")
    crash = "```python\nprint(3)\nraise SystemExit(1)\n```"
    assert reward([crash], verification_info=[INFO]) == [0.0]


def test_code_format_is_open_r1s_regex():
    reward = resolve_reward("code_format")
    good = "<think>\nplan\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>"
    assert reward([chat(good), chat(good.replace("python", "cpp")), chat("```python\nprint(1)\n```")]) == [1.0, 0.0, 0.0]
    assert reward([chat(good.replace("python", "cpp"))], language=["cpp"]) == [1.0]


def test_extraction_styles():
    text = "first\n```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```\n"
    assert extract_code(text, "open-r1") == "print(2)\n" and extract_code(text, "verl") == "\nprint(2)\n"
    assert extract_code("print(3)", "open-r1") == "" and extract_code("print(3)", "verl") == "print(3)"
    assert extract_code("```python print(4)```", "open-r1") == ""  # open-r1 needs the newline after the tag
    verl = bind_code_settings("code", CodeSettings(extraction="verl"))
    assert verl(["print(3)"], verification_info=[{"language": "python", "test_cases": [
        {"input": "", "output": "3", "type": "stdin_stdout"}]}]) == [1.0]


HEAD = 'def add(a, b):\n    """Sum."""\n'
CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"


@pytest.mark.parametrize("completion, expected", [
    ("    return a + b\n", 1.0),                                        # the prompt's continuation
    ("```python\ndef add(a, b):\n    return a + b\n```", 1.0),          # a whole function, fenced
    ("    return a * b\n", 0.0),
    ("    return a + b\nimport sys\nsys.exit(0)\n", 0.0),                # exits before the tests
    ("    return a + b\nimport os\nos._exit(0)\n", 0.0),
    ("    return a + b\ndef check(candidate):\n    pass\n", 1.0),       # the row's check comes after: still run
])
def test_code_check_runs_humaneval_style_tests(completion, expected):
    reward = resolve_reward("code_check")
    assert reward([completion], code_prompt=[HEAD], test=[CHECK], entry_point=["add"]) == [expected]


def test_program_joins_prompt_and_completion():
    assert program(HEAD, "    return a\n", "add") == HEAD + "    return a\n"
    fenced = "```python\ndef add(a, b):\n    return a\n```"  # verl's split keeps the newline after the tag
    assert program(HEAD, fenced, "add") == HEAD + "\n\ndef add(a, b):\n    return a\n"


def test_missing_columns_and_bad_settings_say_what_to_do():
    with pytest.raises(ValueError, match="verification_info"):
        resolve_reward("code")(["x"])
    with pytest.raises(ValueError, match="entry_point"):
        resolve_reward("code_check")(["x"], test=["pass"])
    with pytest.raises(ValueError, match="code_sandbox must be one of"):
        CodeSettings(sandbox="docker")


def test_each_test_execution_is_counted_by_its_outcome():
    """Wrong answer, runtime error, time and output limits, a sandbox failure: users plot them apart."""
    reward = resolve_reward("code")
    programs = [RIGHT, HALF, "```python\nraise ValueError('x')\n```", "no code at all",
                "```python\nimport sys\nsys.stdout.write('x' * (4 << 20))\n```"]
    reward([chat(p) for p in programs], verification_info=[INFO] * len(programs))
    stats = reward.pop_stats()
    assert stats == {"code_reward/tests/passed": 3.0, "code_reward/tests/wrong_answer": 3.0,
                     "code_reward/tests/runtime_error": 2.0, "code_reward/tests/time_limit": 0.0,
                     "code_reward/tests/output_limit": 2.0, "code_reward/tests/sandbox_error": 0.0,
                     "code_reward/no_code": 1.0}
    assert set(reward.pop_stats().values()) == {0.0}  # read once


def test_the_outcome_of_a_limit_or_a_sandbox_failure():
    def outcome(**fields):
        base = {"exit_code": None, "signal": None, "timed_out": False, "output_truncated": False, "completed": False,
                "stdout": "", "stderr": "", "wall_s": 0.1}
        return Outcome(**(base | fields))

    assert execution_outcome(outcome(timed_out=True, signal=signal.SIGKILL), False) == "time_limit"  # the wall limit
    assert execution_outcome(outcome(signal=signal.SIGXCPU), False) == "time_limit"  # the CPU limit
    assert execution_outcome(outcome(signal=signal.SIGSEGV), False) == "runtime_error"
    assert execution_outcome(outcome(exit_code=0, output_truncated=True), False) == "output_limit"
    assert execution_outcome(Outcome.failed("worker died"), False) == "sandbox_error"
    assert execution_outcome(outcome(exit_code=0), False) == "wrong_answer"
    assert execution_outcome(outcome(exit_code=0), True) == "passed"


def test_a_function_call_test_counts_a_failed_assert_as_a_wrong_answer():
    reward = resolve_reward("code_check")
    test = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    completions = ["```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return a\n```",
                   "```python\ndef add(a, b):\n    return a / 0\n```", "```python\n```"]
    assert reward(completions, test=[test] * 4, entry_point=["add"] * 4) == [1.0, 0.0, 0.0, 0.0]
    stats = reward.pop_stats()
    assert (stats["code_check_reward/tests/passed"], stats["code_check_reward/tests/wrong_answer"],
            stats["code_check_reward/tests/runtime_error"], stats["code_check_reward/no_code"]) == (1.0, 1.0, 2.0, 1.0)
