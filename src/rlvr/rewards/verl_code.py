"""verl's code scores in rlvr's sandbox: ``prime_code.compute_score`` with its executor swapped.

verl's ``default_compute_score`` sends the data sources ``codecontests``, ``apps``, ``codeforces`` and
``taco`` to ``prime_code.compute_score(solution_str, ground_truth, continuous=True)``, whose
``check_correctness`` runs verl's APPS runner (``testing_util.run_test``) in a
``multiprocessing.Process`` on the training machine, guarded only by ``reliability_guard``.
``sandboxed_compute_score`` keeps prime_code's steps and numbers and runs that same ``run_test``
(loaded from verl's installed file) inside the sandbox instead:

1. all cases at once (``timeout=5``, a global limit of 6 s): all ``True`` -> 1.0;
2. else each of the first 10 cases alone (``timeout=10``, 11 s): the fraction of ``True`` results.

``ground_truth`` is the test-case JSON (``{"inputs": [...], "outputs": [...], "fn_name"?: ...}``);
the program is the text after the last ```` ```python ```` up to the next fence (prime_code's split).
Rows of other data sources score None. verl must be installed
(``make setup`` installs it without its dependencies); its runner needs numpy only.

Convention: the score is ``float(compute_score(...)[0])``, as ``default_compute_score`` returns it;
a sandbox failure (the worker, not the program) raises, so the response's value is None (VerlScore).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from rlvr.dependencies import MissingDependency
from rlvr.rewards.code_rewards import extract_code
from rlvr.rewards.code_rows import check_verl_ground_truth
from rlvr.rewards.math_rewards import completion_text
from rlvr.rewards.sandbox import Job, SandboxLimits, shared_pool

VERL_CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
PER_CASE_LIMIT = 10  # prime_code tests the first 10 cases one by one


def verl_runner_path() -> str:
    """The file of verl's APPS runner (``prime_code/testing_util.py``), found without importing verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency("the verl code scores run verl's own test runner (verl.utils.reward_score."
                                "prime_code), but verl is not installed; pip install --no-deps verl==0.9.1")
    path = Path(next(iter(spec.submodule_search_locations))) / "utils/reward_score/prime_code/testing_util.py"
    if not path.is_file():
        raise MissingDependency(f"verl is installed but has no {path}; install verl==0.9.1")
    return str(path)


def load_verl_prime_code():
    """verl's own ``prime_code`` module (its ``compute_score``, verl's local executor), for running it beside
    rlvr's scores on safe programs (a test, a benchmark) — never on a model's output. Loaded from its folder,
    since verl's package ``__init__`` needs ray."""
    folder = Path(verl_runner_path()).parent
    spec = importlib.util.spec_from_file_location("verl_prime_code", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["verl_prime_code"] = module
    spec.loader.exec_module(module)
    return module


def _check(in_outs: dict, solution: str, timeout: int, sandbox: str) -> list:
    """verl's ``check_correctness`` in the sandbox: run_test's results, [-1]*n past the global limit."""
    limits = SandboxLimits(cpu_s=timeout + 1, wall_s=timeout + 1, memory_mb=4096, processes=64)
    job = Job(solution, kind="verl_apps", limits=limits,
              extra={"in_outs": in_outs, "runner_path": verl_runner_path(), "timeout": timeout})
    outcome = shared_pool(sandbox).run(job)
    if outcome.sandbox_error:
        raise RuntimeError(outcome.sandbox_error)
    if not outcome.completed:  # verl: "global timeout", every case failed
        return [-1] * len(in_outs["inputs"])
    return json.loads(outcome.result)


def sandboxed_compute_score(solution_str: str, ground_truth, *, sandbox: str = "namespaces") -> float:
    """prime_code's ``compute_score(..., continuous=True)[0]`` as a float (module docstring)."""
    solution = extract_code(solution_str, "verl")
    try:
        test_cases = ground_truth if isinstance(ground_truth, dict) else json.loads(ground_truth)
        inputs, outputs = test_cases["inputs"], test_cases["outputs"]
    except (TypeError, ValueError, KeyError):
        return 0.0  # prime_code: its except clause, success = False
    if all(result is True for result in _check(test_cases, solution, 5, sandbox)):
        return 1.0
    results = []
    for index in range(min(len(inputs), PER_CASE_LIMIT)):
        case = {"inputs": [inputs[index]], "outputs": [outputs[index]]}  # prime_code drops fn_name here: kept
        results.extend(_check(case, solution, 10, sandbox))
    return sum(result is True for result in results) / (len(results) or 1)


class VerlCodeReward:
    """verl's code data sources as an rlvr reward: ``reward_model["ground_truth"]`` scored in the sandbox.

    Convention: rows of other data sources score None (not applicable: combine with another reward for
    them; verl's ``default_compute_score`` itself cannot be imported without ray).
    """

    __name__ = "verl_code"
    required_columns = ("data_source", "reward_model")

    def __init__(self, sandbox: str = "namespaces"):
        self.sandbox = sandbox
        verl_runner_path()  # a missing verl stops the run at set-up, not at the first step

    @staticmethod
    def check_rows(rows: list[dict]) -> None:
        """When the data loads: the ground truth of each of verl's code rows parses (rlvr.rewards.code_rows)."""
        check_verl_ground_truth(rows, VERL_CODE_SOURCES)

    def __call__(self, completions, data_source=None, reward_model=None, **kwargs) -> list[float | None]:
        if data_source is None or reward_model is None:
            raise ValueError("verl_code reads verl's `data_source` and `reward_model` ({'ground_truth': test-case "
                             "JSON}) columns, which this dataset lacks")
        return [sandboxed_compute_score(completion_text(completion), rm["ground_truth"], sandbox=self.sandbox)
                if source in VERL_CODE_SOURCES else None
                for completion, source, rm in zip(completions, data_source, reward_model)]
