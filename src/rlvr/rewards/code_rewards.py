"""Code rewards: the completion's program run on its tests in rlvr's sandbox (``rlvr.rewards.sandbox``).

open-r1's three (huggingface/open-r1 ``src/open_r1/rewards.py`` at commit 1416fa0), on its
``verification_info`` rows ``{"language": "python", "test_cases": [{"input", "output", "type":
"stdin_stdout"}]}``:

- ``code``: the fraction of test cases passed. A case passes when the program exits with status 0
  and, line by line over ``zip(stdout.strip().split("\\n"), output.split("\\n"))``, the stripped lines
  are equal (zip stops at the shorter: open-r1's comparison, kept);
- ``binary_code``: 1.0 when that fraction is above 0.99 (open-r1's ``BINARY_THRESHOLD``), else 0.0;
- ``code_format``: 1.0 for ``<think>\\n…\\n</think>\\n<answer>\\n…```python…```…\\n</answer>`` (the
  row's ``language`` column, else python).

and a function-call style (HumanEval's): ``code_check`` runs ``code_prompt`` + the completion, then
the row's ``test`` and ``check(<entry_point>)``; 1.0 when the test code ran to its end.

Where this departs from open-r1: the programs run here, in the sandbox, not in E2B/Morph; a case
runs with 5 s of CPU and 10 s of wall time (open-r1: ``subprocess.run(timeout=5)``), and, as in
open-r1's E2B path, a case that times out makes the completion's score 0.0 (there the evaluation
script raises, and E2B's missing result is read as 0.0); rows in another language than python
score None (rlvr runs python only); ``verification_info`` may be a JSON string (a parquet column).

Code extraction (``code_extraction``): ``open-r1`` (the last ```` ```python\\n…``` ```` block, "" if none),
``verl`` (the text after the last ```` ```python ```` up to the next fence, the whole text if none),
or ``auto``: each reward its project's (open-r1's for ``code``/``binary_code``, verl's for ``code_check``).

Convention: a sandbox failure (the worker, not the program) scores None for that completion.
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from dataclasses import dataclass, field

from rlvr.rewards.code_rows import check_function_tests, check_verification_info
from rlvr.rewards.math_rewards import completion_text
from rlvr.rewards.open_r1 import completion_content
from rlvr.rewards.sandbox import SANDBOX_MODES, Job, Outcome, SandboxLimits, shared_pool

BINARY_THRESHOLD = 0.99  # open-r1's binary_code_reward
CASE_LIMITS = SandboxLimits(cpu_s=5, wall_s=10)
CODE_EXTRACTIONS = ("auto", "open-r1", "verl")
# what one test execution came to, as judges report it; counted per step (``pop_stats``: rewards/<f>/tests/<x>)
TEST_OUTCOMES = ("passed", "wrong_answer", "runtime_error", "time_limit", "output_limit", "sandbox_error")
_CPU_LIMIT_SIGNALS = (signal.SIGXCPU, signal.SIGKILL)  # RLIMIT_CPU's soft edge, then its hard edge


@dataclass(frozen=True)
class CodeSettings:
    """How code rewards run programs: the sandbox mode (``rlvr.rewards.sandbox``) and the code extraction."""

    sandbox: str = "namespaces"
    extraction: str = "auto"

    def __post_init__(self):
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"code_sandbox must be one of {SANDBOX_MODES}, got {self.sandbox!r}")
        if self.extraction not in CODE_EXTRACTIONS:
            raise ValueError(f"code_extraction must be one of {CODE_EXTRACTIONS}, got {self.extraction!r}")


def extract_code(text: str, style: str, language: str = "python") -> str:
    """The program in a completion. ``open-r1``: its ``extract_code``; ``verl``: prime_code's split."""
    if style == "open-r1":
        matches = re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)
        return matches[-1] if matches else ""
    if style == "verl":
        return text.split(f"```{language}")[-1].split("```")[0]
    raise ValueError(f"code_extraction must be one of {CODE_EXTRACTIONS[1:]} here, got {style!r}")


def _info(value) -> dict:
    info = json.loads(value) if isinstance(value, str) else value
    if not isinstance(info, dict) or not isinstance(info.get("test_cases"), list):
        raise ValueError("a verification_info value must be {'language': ..., 'test_cases': [{'input', 'output'}, ...]} "
                         f"(open-r1's rows), got {str(value)[:120]!r}")
    return info


def case_passes(outcome: Outcome, expected: str) -> bool:
    """open-r1's check of one stdin/stdout case: exit status 0, then equal stripped lines over zip."""
    if outcome.exit_code != 0 or outcome.output_truncated or outcome.timed_out:
        return False
    lines = outcome.stdout.strip().split("\n")
    return all(got.strip() == want.strip() for got, want in zip(lines, expected.split("\n")))


def execution_outcome(outcome: Outcome, passed: bool) -> str:
    """One of :data:`TEST_OUTCOMES` for a test execution (``passed``: its check held). Convention, in this
    order: past the output cap is an output limit (the sandbox then kills it); past the wall limit, or killed by
    SIGXCPU or SIGKILL (RLIMIT_CPU's two edges), a time limit; a non-zero exit or another signal a runtime
    error; exit 0 with the check failing a wrong answer."""
    if outcome.sandbox_error:
        return "sandbox_error"
    if passed:
        return "passed"
    if outcome.output_truncated:  # (the sandbox kills a program past its output cap)
        return "output_limit"
    if outcome.timed_out or outcome.signal in _CPU_LIMIT_SIGNALS:
        return "time_limit"
    return "wrong_answer" if outcome.exit_code == 0 else "runtime_error"


class OutcomeCounts:
    """A code reward's counters since the rewarder last read them (``pop_stats``, into the step's metrics as
    ``rewards/<name>/tests/<outcome>`` and ``rewards/<name>/no_code``): users plot these apart."""

    def __init__(self):
        self.counts: Counter = Counter()

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def pop(self, name: str) -> dict[str, float]:
        stats = {f"{name}/tests/{key}": float(self.counts[key]) for key in TEST_OUTCOMES}
        stats[f"{name}/no_code"] = float(self.counts["no_code"])
        self.counts.clear()
        return stats


@dataclass(frozen=True)
class CodeReward:
    """open-r1's ``code`` (``binary=False``) or ``binary_code`` reward, run in the sandbox (module docstring).

        code = #passed / #cases;   binary_code = 1.0 if code > 0.99 else 0.0
    """

    sandbox: str = "namespaces"
    extraction: str = "auto"
    binary: bool = False
    outcomes: OutcomeCounts = field(default_factory=OutcomeCounts, compare=False, repr=False)
    required_columns = ("verification_info",)
    check_rows = staticmethod(check_verification_info)  # when the data loads (rlvr.rewards.code_rows)

    @property
    def __name__(self) -> str:
        return "binary_code_reward" if self.binary else "code_reward"

    def __call__(self, completions, verification_info=None, **kwargs) -> list[float | None]:
        if verification_info is None:
            raise ValueError(f"{self.__name__} reads the tests from a `verification_info` column (open-r1's rows), "
                             "which this dataset lacks")
        style = "open-r1" if self.extraction == "auto" else self.extraction
        infos = [_info(value) for value in verification_info]
        jobs, owners = [], []
        for index, (completion, info) in enumerate(zip(completions, infos)):
            if info.get("language", "python") != "python":
                continue
            code = extract_code(completion_text(completion), style)
            if not code.strip():
                self.outcomes.add("no_code")
            for case in info["test_cases"]:
                jobs.append(Job(code, stdin=case["input"], limits=CASE_LIMITS))
                owners.append((index, case["output"]))
        kinds: list[list[str]] = [[] for _ in infos]  # each completion's cases, by outcome
        for (index, expected), outcome in zip(owners, shared_pool(self.sandbox).run_many(jobs)):
            kind = execution_outcome(outcome, case_passes(outcome, expected))
            self.outcomes.add(kind)
            kinds[index].append(kind)
        return [self._score(mine) if info.get("language", "python") == "python" else None
                for info, mine in zip(infos, kinds)]

    def pop_stats(self) -> dict[str, float]:
        return self.outcomes.pop(self.__name__)

    def _score(self, kinds: list[str]) -> float | None:
        """A completion's score from the outcomes of its cases."""
        if "sandbox_error" in kinds:
            return None
        if "time_limit" in kinds or not kinds:
            return 0.0  # open-r1 under E2B: the script raised (its 5 s per case), read as 0.0; no cases: 0/0
        rate = kinds.count("passed") / len(kinds)
        return (1.0 if rate > BINARY_THRESHOLD else 0.0) if self.binary else rate


@dataclass(frozen=True)
class CodeFormatReward:
    """open-r1's ``code_format`` (``get_code_format_reward``): the think/answer format with a fenced block.

    Convention: open-r1's regex with DOTALL and MULTILINE; the language is the row's ``language`` column
    when the dataset has one, else ``language`` (open-r1's ``code_language``, default python).
    """

    language: str = "python"
    __name__ = "code_format_reward"

    def __call__(self, completions, language=None, **kwargs) -> list[float]:
        languages = language if language is not None else [self.language] * len(completions)
        return [1.0 if re.match(rf"^<think>\n.*?\n</think>\n<answer>\n.*?```{lang}.*?```.*?\n</answer>$",
                                completion_content(completion), re.DOTALL | re.MULTILINE) else 0.0
                for completion, lang in zip(completions, languages)]


@dataclass(frozen=True)
class CodeCheckReward:
    """HumanEval's functional test: ``code_prompt`` + program, the row's ``test``, ``check(entry_point)``.

        reward = 1.0 if the test code ran to its end (no exception, no exit), else 0.0

    Convention: a completion that defines ``entry_point`` itself runs after the prompt (which still gives
    the imports), one that does not is taken as the prompt's continuation (HumanEval's own join).
    """

    sandbox: str = "namespaces"
    extraction: str = "auto"
    outcomes: OutcomeCounts = field(default_factory=OutcomeCounts, compare=False, repr=False)
    __name__ = "code_check_reward"
    required_columns = ("test", "entry_point")
    check_rows = staticmethod(check_function_tests)  # when the data loads (rlvr.rewards.code_rows)

    def __call__(self, completions, test=None, entry_point=None, code_prompt=None, **kwargs) -> list[float | None]:
        if test is None or entry_point is None:
            raise ValueError("code_check reads a `test` column (defining check(candidate)) and an `entry_point` "
                             "column (the function's name), which this dataset lacks (HumanEval's rows have both)")
        heads = code_prompt if code_prompt is not None else [""] * len(completions)
        self.outcomes.add("no_code", sum(not call_style_code(completion_content(c), self.extraction).strip()
                                         for c in completions))
        jobs = [Job(program(head, completion_content(c), entry, self.extraction), kind="checked",
                    test=f"{tests}\ncheck({entry})\n", limits=CASE_LIMITS)
                for c, head, tests, entry in zip(completions, heads, test, entry_point)]
        outcomes = shared_pool(self.sandbox).run_many(jobs)
        for outcome in outcomes:  # a failed assert of the test: a wrong answer; any other way out: a runtime error
            kind = execution_outcome(outcome, outcome.completed)
            wrong = kind == "runtime_error" and "AssertionError" in outcome.stderr
            self.outcomes.add("wrong_answer" if wrong else kind)
        return [None if outcome.sandbox_error else float(outcome.completed) for outcome in outcomes]

    def pop_stats(self) -> dict[str, float]:
        return self.outcomes.pop(self.__name__)


def call_style_code(text: str, extraction: str = "auto") -> str:
    """The code of a function-call style completion: its fenced block, or the whole text when it has none."""
    return extract_code(text, "verl" if extraction == "auto" else extraction) if "```" in text else text


def program(head: str, text: str, entry_point: str, extraction: str = "auto") -> str:
    """The program a function-call test runs: the prompt and the completion's code (class docstring)."""
    code = call_style_code(text, extraction)
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        return f"{head}\n{code}"
    return head + code
