import random

import pytest

from rlvr.data import PromptSampler

ROWS = [{"id": f"r{i}", "prompt": f"p{i}", "answer": str(i)} for i in range(6)]


def _ids(rows):
    return [row["id"] for row in rows]


def test_unshuffled_stream_wraps_epochs():
    sampler = PromptSampler(ROWS[:3], seed=0, shuffle=False)
    assert _ids(sampler.take(5)) == ["r0", "r1", "r2", "r0", "r1"]
    assert sampler.position == 5
    assert _ids(sampler.take(2)) == ["r2", "r0"]


def test_each_epoch_is_a_permutation_from_seed_and_epoch_only():
    sampler = PromptSampler(ROWS, seed=7)
    stream = _ids(sampler.take(18))  # three epochs of six
    for epoch in range(3):
        order = list(range(6))
        random.Random(f"7:{epoch}").shuffle(order)
        assert stream[6 * epoch : 6 * epoch + 6] == [f"r{i}" for i in order]
    assert stream[:6] != stream[6:12]  # epochs are reshuffled


def test_deterministic_and_independent_of_global_rng():
    random.seed(1)
    first = _ids(PromptSampler(ROWS, seed=3).take(20))
    random.seed(2)
    random.random()
    assert _ids(PromptSampler(ROWS, seed=3).take(20)) == first
    assert _ids(PromptSampler(ROWS, seed=4).take(20)) != first


def test_chunking_does_not_change_the_stream():
    chunked = PromptSampler(ROWS, seed=5)
    pieces = chunked.take(1) + chunked.take(0) + chunked.take(4) + chunked.take(9)
    assert _ids(pieces) == _ids(PromptSampler(ROWS, seed=5).take(14))


def test_resume_continues_with_the_same_rows():
    uninterrupted = _ids(PromptSampler(ROWS, seed=11).take(20))
    sampler = PromptSampler(ROWS, seed=11)
    sampler.take(7)
    state = sampler.state_dict()
    assert state == {"position": 7, "seed": 11, "shuffle": True, "num_rows": 6}
    resumed = PromptSampler(ROWS, seed=11)
    resumed.load_state_dict(state)
    assert resumed.position == 7
    assert _ids(resumed.take(13)) == uninterrupted[7:]


def test_take_returns_copies():
    sampler = PromptSampler(ROWS, seed=0, shuffle=False)
    sampler.take(1)[0]["answer"] = "changed"
    assert ROWS[0]["answer"] == "0"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 12}, "seed=12 but this sampler has seed=11"),
        ({"num_rows": 5}, "num_rows=5 but this sampler has num_rows=6"),
        ({"shuffle": False}, "shuffle=False but this sampler has shuffle=True"),
        ({"position": -1}, "position=-1"),
    ],
)
def test_load_state_dict_rejects_another_run(change, message):
    sampler = PromptSampler(ROWS, seed=11)
    with pytest.raises(ValueError, match=message):
        sampler.load_state_dict({**sampler.state_dict(), **change})


def test_load_state_dict_missing_keys():
    with pytest.raises(ValueError, match=r"lacks \['num_rows', 'seed', 'shuffle'\]"):
        PromptSampler(ROWS, seed=0).load_state_dict({"position": 3})


def test_bad_arguments():
    with pytest.raises(ValueError, match="no rows"):
        PromptSampler([], seed=0)
    with pytest.raises(ValueError, match="non-negative integer"):
        PromptSampler(ROWS, seed=0).take(-1)
    with pytest.raises(ValueError, match="seed is '0'"):
        PromptSampler(ROWS, seed="0")
