"""rewarding.py: the Rewarder on toy reward functions (weighted totals, per-function columns, failures counted,
the keyword arguments TRL passes, log_metric/log_extra), its failure policy, and LoggedValues."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from rlvr.data.rows import normalize_rows
from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.rollout import Completion
from rlvr.train.rewarding import (
    ERROR_WINDOW_STEPS,
    LoggedValues,
    Rewarder,
    RewardFunctionFailed,
    logged_metric_means,
)
from rlvr.train.rollout_phase import Group

ROWS = [{"id": "a", "prompt": "q1", "answer": "4"}, {"id": "b", "prompt": "q2", "answer": "7"}]


def exact(prompts, completions, answer, **kwargs):
    return [1.0 if c == a else 0.0 for c, a in zip(completions, answer)]


def length(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


def boom(prompts, completions, **kwargs):
    raise ValueError("boom")


def only_first_row(prompts, completions, id, **kwargs):  # the dataset's `id` column
    return [1.0 if i == "a" else None for i in id]


@pytest.fixture
def make_rewarder():
    made = []

    def make(funcs, weights=None, **kwargs):
        kwargs = {"verifier_workers": 1, "verifier_timeout": 5.0, "answer_extraction": "boxed", **kwargs}
        made.append(Rewarder(funcs, weights, **kwargs))
        return made[-1]

    yield make
    for rewarder in made:
        rewarder.close()


def test_reward_texts_weighs_each_function_and_returns_its_column(make_rewarder):
    """total = Σ w_f · r_f per completion; parts hold each function's values under its name; one call counted."""
    rewarder = make_rewarder([exact, length], [2.0, 0.5])
    totals, parts, stats = rewarder.reward_texts(ROWS, [["4", "44"], ["7"]])
    assert parts == {"exact": [1.0, 0.0, 1.0], "length": [1.0, 2.0, 1.0]}
    assert totals == [2.0 + 0.5, 0.0 + 1.0, 2.0 + 0.5]
    assert stats == {"rewards/exact/errors": 0.0, "rewards/exact/nonfinite": 0.0, "rewards/length/errors": 0.0,
                     "rewards/length/nonfinite": 0.0, "rewards/all_none": 0.0, "rewards/calls": 1.0}
    assert rewarder.names == ["exact", "length"] and rewarder.correctness is None


def test_a_failing_function_is_counted_and_leaves_the_others_total(make_rewarder):
    """A raising function gives None for the whole call, one error, and its cause in last_failure; a completion
    that no function scored totals 0 and is counted in all_none."""
    rewarder = make_rewarder([boom, only_first_row])
    totals, parts, stats = rewarder.reward_texts(ROWS, [["x", "y"], ["z"]])
    assert parts == {"boom": [None, None, None], "only_first_row": [1.0, 1.0, None]}
    assert totals == [1.0, 1.0, 0.0]
    assert stats["rewards/boom/errors"] == 1.0 and stats["rewards/only_first_row/errors"] == 0.0
    assert stats["rewards/all_none"] == 1.0
    assert rewarder.last_failure == {"boom": "ValueError: boom"}


def test_functions_get_trl_s_keyword_arguments_aligned_with_the_completions(make_rewarder):
    """Each completion gets its row's prompt and columns (None where a row lacks one; no rlvr-internal fields; a
    short solution read as the gold under `solution`); chat prompts get message-list completions; completion_ids
    come from the tokenizer; trainer_state carries max_steps."""
    seen = []

    def record(prompts, completions, **kwargs):
        seen.append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(completions)

    chat = [{"role": "user", "content": "q2"}]
    rows = [{"id": "a", "prompt": "q1", "answer": "1", "level": 3, "rephrasings": ["Q1?"]},
            {"id": "b", "prompt": chat, "answer": "2", "solution_as_gold": "2"}]
    rewarder = make_rewarder([record], max_steps=12, tokenizer=tiny_byte_tokenizer())
    rewarder.reward_texts(rows, [["x", "yz"], ["w"]])
    (call,) = seen
    assert call["prompts"] == ["q1", "q1", chat]
    assert call["completions"] == ["x", "yz", [{"role": "assistant", "content": "w"}]]
    assert call["id"] == ["a", "a", "b"] and call["answer"] == ["1", "1", "2"]
    assert call["level"] == [3, 3, None] and call["solution"] == [None, None, "2"]
    assert not {"rephrasings", "solution_as_gold"} & set(call)
    assert call["completion_ids"] == [[ord("x")], [ord("y"), ord("z")], [ord("w")]]  # byte tokenizer: id = byte
    assert call["trainer_state"].max_steps == 12
    assert callable(call["log_extra"]) and callable(call["log_metric"])


def test_a_trl_configs_rows_pass_the_datasets_columns_and_the_verifier_still_gets_the_gold(make_rewarder):
    """preset=trl keeps each row as given (rlvr.data.rows.normalize_row's keep_row): a function gets the dataset's
    columns exactly, TRL's _calculate_rewards (no ``answer`` or ``id`` the dataset lacks; a GSM8K answer as it is);
    a function declaring ``reads_gold`` (rlvr's verifier) gets rlvr's normalised gold as ``answer``."""
    seen = {}

    def user(prompts, completions, **kwargs):
        seen["user"] = kwargs
        return [0.0] * len(completions)

    def verifier(prompts, completions, answer, **kwargs):
        seen["verifier"] = answer
        return [0.0] * len(completions)

    verifier.reads_gold = True
    given = [{"prompt": "1 + 1?", "solution": "So \\boxed{2}."}, {"prompt": "2 + 2?", "solution": "#### 4"}]
    rows = normalize_rows(given, "test", keep_row=True)
    make_rewarder([user, verifier]).reward_texts(rows, [["x"], ["y"]])
    assert set(seen["user"]) == {"solution", "completion_ids", "trainer_state", "log_extra", "log_metric"}
    assert seen["user"]["solution"] == ["So \\boxed{2}.", "#### 4"] and seen["verifier"] == ["2", "4"]
    own = normalize_rows(given[:1], "test")  # rlvr's preset: its gold and id too
    make_rewarder([user]).reward_texts(own, [["x"]])
    assert seen["user"]["answer"] == ["2"] and seen["user"]["id"] == ["test#0"]


def _group(gid: int, texts: list[str]) -> Group:
    return Group(group_id=gid, row={"id": "a" if gid == 1 else "b", "prompt": f"q{gid}", "answer": str(gid)},
                 prompt_ids=[1], completions=[Completion([100 + gid, i], [0.0, 0.0], False) for i in range(len(texts))],
                 texts=texts)


def test_reward_groups_fill_each_group_s_slice(make_rewarder):
    """reward_groups splits the call's values back per group: rewards, parts, rewarded (some function gave a
    value), the correctness reward's name; the functions see the groups' token ids and global_step = step − 1."""
    steps, ids = [], []

    def correct(prompts, completions, completion_ids, trainer_state, **kwargs):
        steps.append(trainer_state.global_step)
        ids.extend(completion_ids)
        return [1.0 if c == "right" else 0.0 for c in completions]

    correct.is_correctness = True
    rewarder = make_rewarder([correct, only_first_row], [1.0, 0.5])
    first, second = _group(1, ["right", "wrong"]), _group(2, ["right"])
    rewarder.reward_groups([first, second], step=5)
    assert steps == [4] and ids == [[101, 0], [101, 1], [102, 0]]
    assert first.rewards == [1.5, 0.5] and second.rewards == [1.0]
    assert first.reward_parts == {"correct": [1.0, 0.0], "only_first_row": [1.0, 1.0]}
    assert second.reward_parts == {"correct": [1.0], "only_first_row": [None]}
    assert first.rewarded == [True, True] and second.rewarded == [True]
    assert first.correctness == second.correctness == "correct" == rewarder.correctness
    assert first.correct == [True, False]


def test_log_metric_and_log_extra_reach_the_counters_and_the_groups(make_rewarder, caplog):
    """log_metric values become #sum/#n counters (averaged by logged_metric_means); a log_extra column with one value
    per completion reaches each group's reward_extras, JSON-safe (others as str); one with another count is
    dropped with a warning naming it."""

    def logging_fn(prompts, completions, log_metric, log_extra, **kwargs):
        for c in completions:
            log_metric("chars", len(c))
        log_extra("note", [{"n": len(c)} if c != "bb" else {1, 2} for c in completions])
        log_extra("short", [1])
        return [0.0] * len(completions)

    rewarder = make_rewarder([logging_fn])
    first, second = _group(1, ["a", "bb"]), _group(2, ["cccc"])
    with caplog.at_level(logging.WARNING, logger="rlvr.train.rewarding"):
        stats = rewarder.reward_groups([first, second])
    assert stats["reward_fn/chars#sum"] == 7.0 and stats["reward_fn/chars#n"] == 3.0
    assert logged_metric_means(stats) == {"reward_fn/chars": pytest.approx(7 / 3)}
    assert first.reward_extras == {"note": [{"n": 1}, "{1, 2}"]} and second.reward_extras == {"note": [{"n": 4}]}
    assert "log_extra('short', ...) got 1 values for the call's 3 completions" in caplog.text


def test_logged_values_refuse_what_is_not_a_finite_number():
    """log_metric takes a non-empty name and a finite real (a 0-d tensor is read with .item()); bool, NaN and text
    are TypeErrors."""
    logged = LoggedValues()
    logged.log_metric("x", torch.tensor(2.5))
    logged.log_metric("x", 1)
    assert logged.counters() == {"reward_fn/x#sum": 3.5, "reward_fn/x#n": 2.0}
    for name, value in (("", 1.0), ("x", True), ("x", math.nan), ("x", "1")):
        with pytest.raises(TypeError):
            logged.log_metric(name, value)


def test_a_function_failing_every_call_of_the_first_step_stops_the_run(make_rewarder):
    """The first step's counters with errors == calls for one function stop the run naming it (its cause comes from
    another rank when this one saw no failure)."""
    rewarder = make_rewarder([exact, length])
    with pytest.raises(RewardFunctionFailed, match=r"step 1: reward function 'length' failed at every call of the "
                                                   r"first step \(the failure happened on another rank"):
        rewarder.check_failures(1, {"rewards/calls": 2.0, "rewards/exact/errors": 0.0, "rewards/length/errors": 2.0})


def test_later_failures_stop_the_run_over_a_window_of_steps(make_rewarder):
    """After the first step the rule is the error fraction over the last ERROR_WINDOW_STEPS steps: six clean steps
    then failing ones reach 5 of 10 (not more than 0.5) at step 11, and 6 of 10 at step 12, when all twelve steps
    together would still be 6 of 12."""
    assert ERROR_WINDOW_STEPS == 10
    rewarder = make_rewarder([exact], max_reward_error_frac=0.5)
    for step in range(1, 12):
        rewarder.check_failures(step, {"rewards/calls": 1.0, "rewards/exact/errors": float(step > 6)})
    with pytest.raises(RewardFunctionFailed, match=r"step 12: reward function 'exact' failed at 6 of its 10 calls "
                                                   r"over the last 10 steps \(more than max_reward_error_frac=0.5\)"):
        rewarder.check_failures(12, {"rewards/calls": 1.0, "rewards/exact/errors": 1.0})
