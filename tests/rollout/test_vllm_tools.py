"""The tool loop on vLLM (``make test-vllm``): a turn is cut at a call, a result is appended as token ids, and vLLM
continues prompt + response so far; the sampling log-probs of the model's tokens after a result are the trainer's on
the whole context, and a result's tokens carry log-prob 0 and tool mask 0.

A random model writes no call syntax, so the format here reads the first ``CUT`` tokens of every first turn as a call
to ``echo`` (the cut, the result's ids, the resumption are the loop's own, as with every format); the runner runs in
this process (the sandbox's own tests run cells). Fails, never skips, without vllm.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.rollout import GREEDY, Sampling
from rlvr.rollout.tool_loop import ToolCall, ToolLoop, ToolResult, Turn
from tests.rollout.test_vllm_engine import SHORT_PROMPTS, TOL, assert_same_as_hf_greedy, tiny_llama, trainer_logprobs
from tests.rollout.test_vllm_engine import vllm_engine as build_vllm

pytestmark = pytest.mark.vllm
CUT = 5
RESULT = [65, 66, 67, 10]  # "ABC\n": what every call shows
TOKENIZER = tiny_byte_tokenizer()


class EveryFirstTurnCalls:
    """A first turn's first ``CUT`` tokens are a call to ``echo``; a later turn calls nothing."""

    def parse_turn(self, context, turn):
        return Turn(min(CUT, len(turn)), (ToolCall("echo", {}),))

    def result_ids(self, turn, calls, results):
        return list(RESULT)

    def missing_tool(self, name, known):
        return ToolResult("no such tool", failed=True)


class Spy:
    """vLLM's engine, recording the prompts of every generate call."""

    def __init__(self, engine):
        self.engine, self.prompts = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, **kwargs):
        self.prompts.append([list(p) for p in prompts])
        return self.engine.generate(prompts, **kwargs)


@pytest.fixture(scope="module")
def policy():
    return tiny_llama(seed=2)


def test_vllm_continues_after_a_result_with_the_trainers_logprobs(policy):
    spy = Spy(build_vllm(policy))
    looped = ToolLoop(spy, TOKENIZER, {"echo": lambda calls: [ToolResult("ABC") for _ in calls]},
                      tool_format=EveryFirstTurnCalls(), max_tool_calling_iterations=1)
    prompts = [p for p in SHORT_PROMPTS for _ in range(3)]
    out = looped.generate(prompts, max_new_tokens=30, sampling=Sampling(0.8), generator_seed=5)
    first, second = spy.prompts
    assert first == prompts
    assert len(second) == sum(len(c.token_ids) > CUT for c in out) > 0  # rows cut at the call were continued
    for prompt, completion in zip(prompts, out):
        mask = list(completion.tool_mask)
        assert completion.token_ids[CUT:CUT + len(RESULT)] == RESULT and mask[CUT:CUT + len(RESULT)] == [0] * 4
        assert mask[:CUT] == [1] * CUT and all(mask[CUT + len(RESULT):])
        assert prompt + completion.token_ids[:CUT] + RESULT in second  # continued from the ids, not re-tokenized
        assert completion.logprobs[CUT:CUT + len(RESULT)] == [0.0] * 4
    scored = trainer_logprobs(policy, prompts, out, 0.8)  # the whole response on the prompt, results as context
    for completion, logprobs in zip(out, scored):
        model = torch.tensor(completion.tool_mask, dtype=torch.bool)
        torch.testing.assert_close(torch.tensor(completion.logprobs)[model], logprobs[model], **TOL)


def test_a_greedy_turn_after_a_result_is_hfs_greedy_continuation(policy):
    looped = ToolLoop(build_vllm(policy), TOKENIZER, {"echo": lambda calls: [ToolResult("ABC") for _ in calls]},
                      tool_format=EveryFirstTurnCalls(), max_tool_calling_iterations=1)
    out = looped.generate(SHORT_PROMPTS, max_new_tokens=24, sampling=GREEDY, generator_seed=0)
    contexts = [p + c.token_ids[:CUT + len(RESULT)] for p, c in zip(SHORT_PROMPTS, out)]
    continued = assert_same_as_hf_greedy(build_vllm(policy), policy, contexts, max_new_tokens=24 - CUT - len(RESULT))
    assert [c.token_ids[CUT + len(RESULT):] for c in out] == continued
