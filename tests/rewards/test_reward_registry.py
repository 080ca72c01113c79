"""resolve_reward (built-ins, module and file specs, errors) and combine_rewards arithmetic."""

import math

import pytest
import torch

from rlvr.rewards import BUILTIN_REWARDS, MathAccuracy, combine_rewards, format_reward, resolve_reward
from rlvr.rewards.extract import DEFAULT_EXTRACTION


def test_builtins(pool):
    for name, build in BUILTIN_REWARDS.items():  # each name (and rlvr:name) is what its factory builds
        for spec in (name, f"rlvr:{name}"):
            assert type(resolve_reward(spec, pool)) is type(build(pool, DEFAULT_EXTRACTION)), spec
    assert isinstance(resolve_reward("accuracy", pool), MathAccuracy)
    assert resolve_reward("format", pool) is format_reward
    with pytest.raises(ValueError, match="needs a VerifierPool"):
        resolve_reward("accuracy", None)


def test_answer_extraction_reaches_accuracy(pool):
    completions = ["so it is 12 in the end"]  # no written form: only flexible finds it
    assert resolve_reward("accuracy", pool)(None, completions, answer=["12"]) == [0.0]
    flexible = resolve_reward("accuracy", pool, answer_extraction="flexible")
    assert flexible(None, completions, answer=["12"]) == [1.0]
    with pytest.raises(ValueError, match="answer_extraction"):
        resolve_reward("accuracy", pool, answer_extraction="loose")


def test_module_spec():
    assert resolve_reward("rlvr.rewards.math_rewards:format_reward") is format_reward


def test_file_spec(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text("def length_penalty(prompts, completions, **kw):\n"
                    "    return [-len(c) / 100 for c in completions]\n")
    fn = resolve_reward(f"{path}:length_penalty")
    assert fn(None, ["ab", "abcd"]) == [-0.02, -0.04]


@pytest.mark.parametrize("spec, error, match", [
    ("acuracy", ValueError, rf"{', '.join(BUILTIN_REWARDS)} \(rlvr's.*module:function.*file\.py:function"),
    ("no_such_module_xyz:f", ValueError, "cannot import"),
    ("rlvr.rewards.math_rewards:nope", ValueError, "no attribute 'nope'"),
    ("rlvr.rewards.extract:MAX_ANSWER_CHARS", TypeError, "not a callable"),
    ("missing/file.py:f", ValueError, "not found"),
    ("", TypeError, "non-empty"),
])
def test_bad_specs(spec, error, match):
    with pytest.raises(error, match=match):
        resolve_reward(spec)


def named(name, values):
    def fn(prompts, completions, **columns):
        return values
    fn.__name__ = name
    return fn


def test_weighted_sum_skips_none():
    a = named("a", [1.0, 0.0, None])
    b = named("b", [0.5, 0.5, 0.5])
    totals, per_func, counts = combine_rewards([a, b], [1.0, 0.2], ["p"] * 3, ["c"] * 3, {})
    # [1·1 + 0.2·0.5, 1·0 + 0.2·0.5, 0.2·0.5] (None is skipped, not zero-filled)
    assert totals == pytest.approx([1.1, 0.1, 0.1])
    assert per_func == {"a": [1.0, 0.0, None], "b": [0.5, 0.5, 0.5]}
    assert counts == {"a/errors": 0, "a/nonfinite": 0, "b/errors": 0, "b/nonfinite": 0, "all_none": 0}


def test_columns_reach_the_functions_and_weights_default_to_one():
    def uses_answer(prompts, completions, answer, **columns):
        return [float(c == a) for c, a in zip(completions, answer)]
    totals, _, _ = combine_rewards([uses_answer, named("one", [1, 1])], None, ["p", "q"], ["4", "5"],
                                   {"answer": ["4", "6"]})
    assert totals == [2.0, 1.0]


def test_failures_become_none_and_are_counted():
    def boom(prompts, completions, **columns):
        raise RuntimeError("bug in user reward")
    funcs = [
        boom,
        named("short", [1.0]),                             # wrong length
        named("words", [1.0, "yes", 0.0]),                 # a non-number
        named("nan", [math.nan, math.inf, 2.0]),           # two non-finite values
        named("ok", [None, None, 1.0]),
    ]
    totals, per_func, counts = combine_rewards(funcs, [1.0] * 5, ["p"] * 3, ["c"] * 3, {})
    # completion 0: every function gave None → 0.0 and all_none; 2: nan's 2.0 + ok's 1.0
    assert totals == [0.0, 0.0, 3.0]
    assert per_func["boom"] == per_func["short"] == per_func["words"] == [None] * 3
    assert per_func["nan"] == [None, None, 2.0]
    assert counts["boom/errors"] == counts["short/errors"] == counts["words/errors"] == 1
    assert counts["nan/nonfinite"] == 2 and counts["nan/errors"] == 0
    assert counts["all_none"] == 2


@pytest.mark.parametrize("returned", [
    None,                          # no list at all
    1.0,                           # a scalar
    torch.tensor(1.0),             # a 0-d tensor (tolist() gives a float)
    [1.0, 0.0, 1.0, 0.0],          # too many values
    [],                            # too few
    "1.0",                         # a string is iterable: three characters
    [[1.0], [0.0], [1.0]],         # nested
    [1.0, 1j, 0.0],                # complex is not a real number
    {"a": 1.0, "b": 0.0, "c": 1.0},  # a dict iterates its keys
])
def test_malformed_returns_count_as_an_error(returned):
    totals, per_func, counts = combine_rewards([named("bad", returned), named("ok", [0.5] * 3)], None,
                                               ["p"] * 3, ["c"] * 3, {})
    assert per_func["bad"] == [None] * 3 and counts["bad/errors"] == 1
    assert totals == [0.5] * 3  # the other function still counts


def test_raising_every_exception_type_is_contained():
    for error in (ValueError("v"), KeyError("k"), ZeroDivisionError(), RecursionError(), MemoryError()):
        def boom(prompts, completions, error=error, **columns):
            raise error
        _, per_func, counts = combine_rewards([boom], None, ["p"], ["c"], {})
        assert per_func["boom"] == [None] and counts["boom/errors"] == 1


def test_ints_too_large_for_a_float_are_nonfinite():
    # float(10**400) overflows: the value is dropped like inf, the rest of the batch is kept.
    totals, per_func, counts = combine_rewards([named("big", [10**400, -(10**400), 3])], None,
                                               ["p"] * 3, ["c"] * 3, {})
    assert per_func["big"] == [None, None, 3.0]
    assert counts == {"big/errors": 0, "big/nonfinite": 2, "all_none": 2}
    assert totals == [0.0, 0.0, 3.0]


def test_tensor_outputs_and_duplicate_names():
    first = named("r", torch.tensor([1.0, 2.0]))
    second = named("r", [True, False])
    totals, per_func, _ = combine_rewards([first, second], [2.0, 1.0], ["p"] * 2, ["c"] * 2, {})
    assert totals == [3.0, 4.0]  # [2·1 + 1, 2·2 + 0]
    assert list(per_func) == ["r", "r_2"]


def test_weights_must_match_functions():
    with pytest.raises(ValueError, match="one weight per function"):
        combine_rewards([named("a", [1.0])], [1.0, 2.0], ["p"], ["c"], {})
    with pytest.raises(ValueError, match="finite"):
        combine_rewards([named("a", [1.0])], [math.nan], ["p"], ["c"], {})


def test_columns_must_align_with_completions():
    with pytest.raises(ValueError, match="once per generated completion"):
        combine_rewards([named("a", [1.0, 1.0])], [1.0], ["p"] * 2, ["c"] * 2, {"answer": ["1"]})
    with pytest.raises(ValueError, match="rename that dataset column"):
        combine_rewards([named("a", [1.0])], [1.0], ["p"], ["c"], {"completions": ["x"]})
