"""The reward contract suite catches plausible one-line bugs: each planted in a copy of the package, the suite run
against the copy fails on the accuracy reward, with the contract's message.

The bugs, in rlvr's built-in accuracy (``rlvr.rewards.math_rewards.MathAccuracy``): it raises on a completion with
no answer to parse; it scores a row without a gold 0.0 instead of leaving it out.
"""

from __future__ import annotations

import pytest

from tests.helpers.package_copy import copy_package, failed_tests, plant, run_tests_on_copy

SUITE = "tests/contracts/test_reward_contract.py"
VERIFY = "        results = self.pool.verify_batch(list(answer), preds)"
BUGS = {
    "raises_on_an_unparsable_completion": (
        "if None in preds:\n            raise ValueError('no answer to verify')",
        "test_never_raises_on_hostile_output[rlvr:accuracy-", "reward 'rlvr:accuracy' raised ValueError"),
    "scores_a_missing_gold_0": (
        "if None in answer:\n            return [0.0] * len(completions)",
        "test_a_row_it_cannot_score_gives_none_or_never_reaches_it[rlvr:accuracy]",
        "gives None (left out of the sum), not 0.0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_a_planted_accuracy_bug_fails_the_suite(bug, tmp_path):
    guard, failing, message = BUGS[bug]
    src = copy_package(tmp_path)
    plant(src, "rewards/math_rewards.py", VERIFY, f"        {guard}\n{VERIFY}")
    done = run_tests_on_copy(src, SUITE, "-k", "accuracy")
    failed = failed_tests(done)
    assert done.returncode != 0 and failed, done.stdout[-3000:]
    assert failed[0].startswith(f"{SUITE}::{failing}"), failed
    assert message in done.stdout, done.stdout[-3000:]
