"""Sampling: one value for the sampling settings, validated, and which settings warp the log-probs."""

import pytest

from rlvr.rollout import GREEDY, Sampling


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
])
def test_bad_settings_are_refused_by_name(kwargs, named):
    with pytest.raises(ValueError, match=named):
        Sampling(**kwargs)


def test_the_settings_that_make_a_warped_distribution_differ_from_the_policys():
    assert Sampling().warps_logprobs == () and GREEDY.greedy and not Sampling().greedy
    assert Sampling(min_p=0.0).warps_logprobs == ()  # min_p = 0 keeps every token
    assert Sampling(top_p=0.9, top_k=5, min_p=0.1).warps_logprobs == ("top_p", "top_k", "min_p")
    assert Sampling(0.0, top_k=5).warps_logprobs == ()  # greedy: the truncations are unused
    assert Sampling(0.0, repetition_penalty=1.2).warps_logprobs == ("repetition_penalty",)  # greedy too
