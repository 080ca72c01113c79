"""The Protocols of the extension points hold for every built-in.

Engines and reward functions have generated contract suites, one case per registered name:
tests/contracts/test_engine_contract.py and tests/contracts/test_reward_contract.py. Here: which built-in
reward means "correct", and the offline scorers.
"""

import pytest

from rlvr.rewards import BUILTIN_REWARDS, VerifierPool
from rlvr.rewards.scorers import build_scorer
from rlvr.rewards.scorers.base import Scorer


def test_accuracy_is_the_correctness_reward_and_format_is_not():
    pool = VerifierPool(num_workers=1)
    try:
        assert getattr(BUILTIN_REWARDS["accuracy"](pool, "boxed"), "is_correctness", False)
        assert not getattr(BUILTIN_REWARDS["format"](pool, "boxed"), "is_correctness", False)
    finally:
        pool.close()


@pytest.mark.parametrize("name", ["reward", "steps"])
def test_offline_scorers_keep_the_scorer_contract(name):
    scorer = build_scorer(name)
    assert isinstance(scorer, Scorer)
    values = scorer(["What is 1+1?"], ["1+1 = 2, so \\boxed{2}"], ["2"], [1.0])
    assert len(values) == 1 and isinstance(scorer.pop_stats(), dict)
