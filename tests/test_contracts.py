"""The Protocols of the extension points hold for every built-in: engines, reward functions, scorers."""

import pytest

from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rewards import BUILTIN_REWARDS, RewardFunction, VerifierPool
from rlvr.rewards.scorers import build_scorer
from rlvr.rewards.scorers.base import Scorer
from rlvr.rollout import ROLLOUT_ENGINES, RolloutEngine, Sampling, build_engine


@pytest.mark.parametrize("name", sorted(set(ROLLOUT_ENGINES) - {"vllm"}))  # vllm: tests/rollout/test_vllm_engine.py
def test_local_engines_keep_the_engine_contract(name):
    model, tok = tiny_random_model_and_tokenizer()
    engine = build_engine(name, model, pad_token_id=tok.pad_token_id, eos_token_ids=[tok.eos_token_id])
    assert isinstance(engine, RolloutEngine)
    seeds = {"row_seeds": [0]} if engine.supports_row_seeds else {"generator_seed": 0}
    (completion,) = engine.generate([[1, 2, 3]], max_new_tokens=3, sampling=Sampling(1.0), **seeds)
    assert 1 <= len(completion.token_ids) <= 3 and len(completion.logprobs) == len(completion.token_ids)


def test_builtin_reward_functions_keep_the_reward_contract():
    pool = VerifierPool(num_workers=1)
    try:
        for name, factory in BUILTIN_REWARDS.items():
            fn = factory(pool, "boxed")
            assert isinstance(fn, RewardFunction), name
            values = fn(["What is 1+1?"], ["\\boxed{2}"], answer=["2"])
            assert len(values) == 1 and (values[0] is None or isinstance(values[0], float)), name
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
