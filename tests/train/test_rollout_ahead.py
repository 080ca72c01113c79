"""Rollouts (rlvr.train.rollout_phase): responses sampled now, or ahead on another thread, and the
checkpoint round trip of a round sampled ahead. A stub generator stands in for GroupGenerator (the
trainer-level checks with vLLM are in tests/train/test_async_generation.py)."""

import threading

import pytest

from rlvr.data import PromptSampler
from rlvr.rollout import Completion
from rlvr.train.rollout_phase import GroupIds, Rollouts


class StubGenerator:
    """requests -> (rows, seed, first group id); sample -> one completion per row, naming the thread and weights."""

    def __init__(self, group_ids):
        self.group_ids, self.weights, self.sampled, self.fail = group_ids, 0, [], None

    def requests(self, rows, *, seed):
        return (tuple(r["i"] for r in rows), seed, self.group_ids.reserve(len(rows)))

    def sample(self, requests):
        if self.fail:
            raise self.fail
        self.sampled.append((requests, self.weights, threading.current_thread().name))
        return [Completion([i, self.weights], [-0.5, -0.25], truncated=False) for i in requests[0]]

    def groups(self, requests, completions):
        return [(requests, c.token_ids) for c in completions]


def make(ahead):
    group_ids = GroupIds()
    sampler = PromptSampler([{"i": i} for i in range(10)], seed=0, shuffle=False)
    gen = StubGenerator(group_ids)
    return Rollouts(gen, sampler, group_ids, prompts_per_step=2, ahead=ahead), gen, sampler


def test_without_async_each_round_samples_its_own_prompts_now():
    rollouts, gen, sampler = make(ahead=False)
    rollouts.start(2, seed=7)  # a no-op without async
    assert rollouts.pending is None and sampler.state_dict()["position"] == 0
    groups = rollouts.round(1, seed=5)
    assert groups == [(((0, 1), 5, 1), [0, 0]), (((0, 1), 5, 1), [1, 0])]
    assert gen.sampled[0][2] == threading.current_thread().name
    assert rollouts.saved_completions() is None


def test_the_next_round_is_sampled_ahead_from_the_weights_of_that_moment():
    rollouts, gen, sampler = make(ahead=True)
    rollouts.round(1, seed=5)  # step 1: nothing ahead yet, sampled now with weights 0
    rollouts.start(2, seed=6)  # during step 1's update
    rollouts.wait()  # the trainer waits before the engine takes the new weights
    gen.weights = 1
    assert sampler.state_dict()["position"] == 4  # step 2's prompts were taken when it started
    groups = rollouts.round(2, seed=6)
    assert [g[0] for g in groups] == [((2, 3), 6, 3)] * 2  # the rows, seed and group ids a sync run uses
    _requests, weights, thread = gen.sampled[1]
    assert thread.startswith("rlvr-rollout") and weights == 0
    rollouts.close()


def test_a_checkpoint_holds_the_state_before_the_round_ahead_and_its_responses():
    rollouts, _gen, _sampler = make(ahead=True)
    rollouts.round(1, seed=5)
    rollouts.start(2, seed=6)
    rollouts.wait()
    (state, counter), saved = rollouts.resume_state(), rollouts.saved_completions()
    assert state["position"] == 2 and counter == 2  # as before step 2's prompts were taken
    assert saved == {"step": 2, "completions": [[[2, 0], [-0.5, -0.25], False], [[3, 0], [-0.5, -0.25], False]]}
    expected = rollouts.round(2, seed=6)

    resumed, gen2, sampler2 = make(ahead=True)
    sampler2.load_state_dict(state)
    resumed.group_ids.last = counter
    resumed.restore(saved)
    gen2.weights = 99  # a resumed run must not sample step 2 again
    assert resumed.round(2, seed=6) == expected and gen2.sampled == []
    rollouts.close()
    resumed.close()


def test_a_round_for_another_step_and_an_engine_error_are_raised():
    rollouts, gen, _ = make(ahead=True)
    rollouts.start(3, seed=1)
    rollouts.wait()
    with pytest.raises(RuntimeError, match="sampled ahead for step 3 reached step 2"):
        rollouts.round(2, seed=1)
    gen.fail = ConnectionError("server gone")
    rollouts.start(4, seed=1)
    with pytest.raises(ConnectionError, match="server gone"):
        rollouts.wait()
    rollouts.close()


def test_responses_with_tool_calls_come_back_from_a_checkpoint_whole():
    """A round sampled ahead with tools: its tool masks and what the calls did (turns included) survive the JSON."""
    import json

    from rlvr.rollout.completion import ToolUse

    use = ToolUse(calls=1, failures=0, seconds=0.5, turns=(("assistant", "```python\n1\n```"), ("tool", "1")))
    rollouts, gen, _ = make(ahead=True)
    gen.sample = lambda requests: [Completion([i, 7, 8], [-0.5, 0.0, -0.1], False, tool_mask=(1, 0, 1), tool_use=use)
                                   for i in requests[0]]
    rollouts.round(1, seed=5)
    rollouts.start(2, seed=6)
    rollouts.wait()
    saved = json.loads(json.dumps(rollouts.saved_completions()))  # as the checkpoint writes and reads it
    resumed, _, _ = make(ahead=True)
    resumed.restore(saved)
    assert resumed.pending.result() == rollouts.pending.result()
    assert resumed.pending.result()[0].tool_use == use and resumed.pending.result()[0].tool_mask == (1, 0, 1)
    rollouts.close()
    resumed.close()
