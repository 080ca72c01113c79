"""Every reward option (the ``reward`` section, and ``multi_objective_aggregation``) has an effect a test sees: the
reward phase built from the config (``train/setup.py``'s ``rewarder_recipe``, the reader) is asserted against
hand-worked values that the default, an inverted rule or a sibling option's value would not give. Then how a code
reward scores each way a program can end, sandbox failures included (docs/code_rewards.md), case by case.

Code rewards run here on a stand-in for the sandbox pool that returns the outcome each test names (the sandbox
itself is tested in tests/rewards/sandbox/ and tests/rewards/code/); docs/design/option_tests.md is the map."""

from __future__ import annotations

import math
import signal
import time

import pytest
import torch

from rlvr.config import build_config
from rlvr.config.sections import RewardConfig
from rlvr.rewards import code_rewards, registry
from rlvr.rewards.sandbox import Outcome
from rlvr.rollout import Completion
from rlvr.train.experience import Experience, Group, compute_advantages
from rlvr.train.plan import compile_plan
from rlvr.train.rewarding import RewardFunctionFailed
from rlvr.train.setup import rewarder_recipe

EPS = 1e-6
ROW = {"id": "a", "prompt": "What is 3 + 4?", "answer": "7"}


def one(prompts, completions, **kwargs):
    return [1.0] * len(completions)


def quarter(prompts, completions, **kwargs):
    return [0.25] * len(completions)


def slow(prompts, completions, **kwargs):
    time.sleep(0.5)
    return [1.0] * len(completions)


@pytest.fixture
def rewarder():
    """``rewarder(**options)``: the run's reward phase for a config with those options (closed at the end)."""
    built = []

    def make(**options):
        cfg = build_config({"model": "tiny-random", "verifier_workers": 1, **options})
        built.append(rewarder_recipe(cfg).build(max_steps=3, tokenizer=None))
        return built[-1]

    yield make
    for r in built:
        r.close()


# ----------------------------------------------------------------------------- the reward functions and weights

@pytest.mark.parametrize(("weights", "total"), [
    (None, 1.25),  # 1·1 + 1·0.25
    ([2.0, 4.0], 3.0),  # 2·1 + 4·0.25 (swapped: 4·1 + 2·0.25 = 4.5)
    ([4.0, 2.0], 4.5),
])
def test_reward_funcs_and_reward_weights(rewarder, weights, total):
    r = rewarder(reward_funcs=[one, quarter], **({} if weights is None else {"reward_weights": weights}))
    totals, parts, _ = r.reward_texts([ROW], [["any answer"]])
    assert totals == [total] and parts == {"one": [1.0], "quarter": [0.25]}
    assert r.names == ["one", "quarter"]


@pytest.mark.parametrize(("mode", "rewards"), [("flexible", [1.0, 1.0, 0.0]), ("boxed", [0.0, 1.0, 0.0])])
def test_answer_extraction(rewarder, mode, rewards):
    """flexible also takes the last number of the text; boxed only \\boxed{}, '#### N' or 'the answer is'."""
    r = rewarder(answer_extraction=mode)
    totals, _, _ = r.reward_texts([ROW], [["3 plus 4 makes 7", "so \\boxed{7}", "so \\boxed{8}"]])
    assert totals == rewards


def test_verifier_workers_and_timeout_reach_the_verifier_pool(rewarder):
    """(The pool's own timeout is tested in tests/rewards/test_verify_pool.py: a verification past it scores 0.)"""
    defaults = RewardConfig()
    pool = rewarder(verifier_workers=3, verifier_timeout=2.5).pool
    assert (pool.num_workers, pool.timeout_s) == (3, 2.5) != (defaults.verifier_workers, defaults.verifier_timeout)


def test_reward_timeout_cuts_a_slow_function(rewarder):
    r = rewarder(reward_funcs=[slow, one], reward_timeout=0.1)
    totals, parts, stats = r.reward_texts([ROW], [["x"]])
    assert parts == {"slow": [None], "one": [1.0]} and totals == [1.0]  # its value None, the call counted as failed
    assert stats["rewards/slow/errors"] == 1.0 and r.timeout_s == 0.1
    _, parts, stats = rewarder(reward_funcs=[slow, one]).reward_texts([ROW], [["x"]])  # the default, 600 s
    assert parts == {"slow": [1.0], "one": [1.0]} and stats.get("rewards/slow/errors", 0.0) == 0.0


@pytest.mark.parametrize(("frac", "stops"), [(None, False), (0.2, True), (0.3, False)])
def test_max_reward_error_frac(rewarder, frac, stops):
    """1 failed call of 4 (not all of the first step's): 0.25 > 0.2 stops the run; the default 0.5 and 0.3 do not."""
    r = rewarder(reward_funcs=[one], **({} if frac is None else {"max_reward_error_frac": frac}))
    if stops:
        with pytest.raises(RewardFunctionFailed, match=r"failed at 1 of its 4 calls .*max_reward_error_frac=0.2"):
            r.check_failures(1, {"rewards/calls": 4.0, "rewards/one/errors": 1.0})
    else:
        r.check_failures(1, {"rewards/calls": 4.0, "rewards/one/errors": 1.0})


# ----------------------------------------------------------------------------- code rewards: the sandbox stand-in

def ok(stdout="3\n") -> Outcome:
    return Outcome(0, None, False, False, False, stdout, "", 0.1)


def outcome(**fields) -> Outcome:
    base = {"exit_code": None, "signal": None, "timed_out": False, "output_truncated": False, "completed": False,
            "stdout": "", "stderr": "", "wall_s": 0.1}
    return Outcome(**(base | fields))


class FakePool:
    """The sandbox pool's ``run_many``: records each job and the mode it was asked for, answers from ``replies``."""

    def __init__(self):
        self.modes, self.jobs, self.replies = [], [], []

    def __call__(self, mode="namespaces", workers=None):  # shared_pool(mode)
        self.modes.append(mode)
        return self

    def run_many(self, jobs):
        self.jobs += jobs
        return [self.replies.pop(0) for _ in jobs]


@pytest.fixture
def sandbox(monkeypatch):
    fake = FakePool()
    monkeypatch.setattr(registry, "shared_pool", fake)  # started at set-up
    monkeypatch.setattr(code_rewards, "shared_pool", fake)  # asked for at each call
    return fake


TWO_CASES = {"language": "python", "test_cases": [{"input": "1 2\n", "output": "3\n", "type": "stdin_stdout"},
                                                 {"input": "5 5\n", "output": "10", "type": "stdin_stdout"}]}
UNFENCED = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.mark.parametrize(("options", "mode"), [({}, "namespaces"), ({"code_sandbox": "limits_only"}, "limits_only")])
def test_code_sandbox(rewarder, sandbox, options, mode):
    code = rewarder(reward_funcs=["code"], **options).funcs[0]
    sandbox.replies = [ok(), ok("10\n")]
    assert code(["```python\nprint(3)\n```"], verification_info=[TWO_CASES]) == [1.0]
    assert sandbox.modes == [mode, mode]  # the pool started at set-up, and the one the programs ran in


@pytest.mark.parametrize(("options", "program"), [
    ({}, ""),  # auto: open-r1's rule for `code` (the last ```python block; none: the empty program)
    ({"code_extraction": "open-r1"}, ""),
    ({"code_extraction": "verl"}, UNFENCED),  # verl's: the text after the last ```python (none: the whole text)
])
def test_code_extraction(rewarder, sandbox, options, program):
    code = rewarder(reward_funcs=["code"], **options).funcs[0]
    sandbox.replies = [ok(), ok("10\n")]
    code([UNFENCED], verification_info=[TWO_CASES])
    assert [job.source for job in sandbox.jobs] == [program, program]


# What each way a program ends gives, for a completion whose first case passes and whose second ends so
# (docs/code_rewards.md, "The rewards" and "What each step logs"; code_rewards.py's convention):
# code = passed cases / cases, 0.0 if any case hit a time limit, None on a sandbox failure; binary_code = 1.0 only
# when every case passed (None on a sandbox failure).
ENDINGS = {
    "passed": (ok("10\n"), 1.0, 1.0),
    "wrong_answer": (ok("11\n"), 0.5, 0.0),  # exit 0, another output
    "runtime_error": (outcome(exit_code=1, stderr="ValueError: x"), 0.5, 0.0),
    "crash": (outcome(signal=signal.SIGSEGV), 0.5, 0.0),  # killed by another signal: a runtime error
    "memory_out": (outcome(exit_code=1, stderr="MemoryError"), 0.5, 0.0),  # RLIMIT_AS: MemoryError, exit 1
    "worker_died": (outcome(stderr="the sandbox worker died while the program ran (killed)"), 0.5, 0.0),
    "output_limit": (outcome(exit_code=0, stdout="10\n", output_truncated=True), 0.5, 0.0),
    "wall_timeout": (outcome(timed_out=True, signal=signal.SIGKILL), 0.0, 0.0),  # the whole completion: 0.0
    "cpu_timeout": (outcome(signal=signal.SIGXCPU), 0.0, 0.0),  # RLIMIT_CPU's soft edge: a time limit too
    "sandbox_error": (Outcome.failed("worker could not start"), None, None),  # neither pass nor fail: unscored
}
COUNTED = {"crash": "runtime_error", "memory_out": "runtime_error", "worker_died": "runtime_error",
           "wall_timeout": "time_limit", "cpu_timeout": "time_limit"}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_code_and_binary_code_score_each_way_a_program_ends(rewarder, sandbox, ending):
    second, code_value, binary_value = ENDINGS[ending]
    code, binary = rewarder(reward_funcs=["code", "binary_code"]).funcs
    sandbox.replies = [ok(), second, ok(), second]
    assert code(["```python\nprint(3)\n```"], verification_info=[TWO_CASES]) == [code_value]
    assert binary(["```python\nprint(3)\n```"], verification_info=[TWO_CASES]) == [binary_value]
    stats = code.pop_stats()
    kind = COUNTED.get(ending, ending)
    assert stats["code_reward/tests/passed"] == 1.0 + (kind == "passed")
    assert stats[f"code_reward/tests/{kind}"] == 1.0 + (kind == "passed")


@pytest.mark.parametrize(("reply", "value", "kind"), [
    (outcome(exit_code=0, completed=True), 1.0, "passed"),  # the test code ran to its end
    (outcome(exit_code=1, stderr="AssertionError"), 0.0, "wrong_answer"),  # the test's assert failed
    (outcome(exit_code=0, completed=False), 0.0, "wrong_answer"),  # exited 0 before the tests' end (sys.exit(0))
    (outcome(exit_code=1, stderr="ZeroDivisionError"), 0.0, "runtime_error"),
    (outcome(exit_code=1, stderr="MemoryError"), 0.0, "runtime_error"),
    (outcome(timed_out=True, signal=signal.SIGKILL), 0.0, "time_limit"),
    (Outcome.failed("worker could not start"), None, "sandbox_error"),
])
def test_code_check_scores_each_way_a_program_ends(rewarder, sandbox, reply, value, kind):
    check = rewarder(reward_funcs=["code_check"]).funcs[0]
    sandbox.replies = [reply]
    assert check(["    return a + b\n"], test=["def check(c):\n    assert c(2, 3) == 5\n"], entry_point=["add"],
                 code_prompt=["def add(a, b):\n"]) == [value]
    assert check.pop_stats()[f"code_check_reward/tests/{kind}"] == 1.0


# ----------------------------------------------------------------------------- multi_objective_aggregation

def test_multi_objective_aggregation():
    """Two reward functions on one group of 3: f1 = [1, 0, 0], f2 = [0, 0.5, 1], weights 1.

    sum_then_normalize: r = [1, 0.5, 1], mean 5/6, σ = √((1/36 + 4/36 + 1/36)/2) = √(1/12):
        Â = (r − 5/6)/σ = [1/√3, −2/√3, 1/√3]
    normalize_then_sum (GDPO): f1 → (f1 − 1/3)/std = [2, −1, −1]/√3 (std √(1/3)); f2 → [−1, 0, 1] (std 0.5);
        r̃ = [2/√3 − 1, −1/√3, 1 − 1/√3] (mean 0), then over the batch Â = r̃ / std(r̃)."""
    def group():
        return Group(group_id=1, row={"id": "a"}, prompt_ids=[1], texts=["", "", ""],
                     completions=[Completion([1], [0.0], False) for _ in range(3)], rewards=[1.0, 0.5, 1.0],
                     reward_parts={"f1": [1.0, 0.0, 0.0], "f2": [0.0, 0.5, 1.0]}, reward_weights={"f1": 1.0, "f2": 1.0})

    def advantages(mode):
        plan = compile_plan(build_config({"model": "tiny-random", "multi_objective_aggregation": mode}))
        return compute_advantages(plan.advantages, Experience.from_groups([group()], plan.scoring_prompts))[0]

    s3 = math.sqrt(3)
    torch.testing.assert_close(advantages("sum_then_normalize"),
                               torch.tensor([1 / s3, -2 / s3, 1 / s3]) * math.sqrt(1 / 12) / (math.sqrt(1 / 12) + EPS))
    f1 = torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=torch.float64) / (1 / s3 + EPS)
    f2 = torch.tensor([-0.5, 0.0, 0.5], dtype=torch.float64) / (0.5 + EPS)
    mixed = f1 + f2  # mean 0 up to rounding
    expected = (mixed - mixed.mean()) / (mixed.std() + EPS)  # ≈ [0.2989, −1.1154, 0.8165]
    torch.testing.assert_close(advantages("normalize_then_sum").double(), expected)
