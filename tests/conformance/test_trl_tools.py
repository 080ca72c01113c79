"""TRL's tool loop beside rlvr's: TRL 1.16's own ``GRPOTrainer(tools=[...]).train()`` and rlvr's ``Trainer`` with the
same ``tools`` on the same tiny model, conversational prompts and scripted model turns, compared after every step.

The model's turns are scripted at the generation boundary (TRL's ``_generate_single_turn``, rlvr's engine inside its
tool loop) from what the prompt holds: a first turn calls ``multiply``, answers, calls two tools at once (one unknown)
or a tool that raises; a turn after one tool result calls again in some rows; the answer follows. Everything else is
each side's own: the chat template listing the tools (Qwen2.5's, as TRL ships it), parsing the calls, running them,
the results' tokens (the template's tool turn), the budget rollback, the call limit, the tool mask, the rewards of
the message lists, the loss and the optimiser. Observed: every prompt a generation was asked for (so the prompts after
each tool turn), each generation batch's completion ids, tool masks and message lists, every optimiser step's loss,
gradient norm and parameters, and every value TRL logs (tools/call_frequency and tools/failure_frequency included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tiny_model import save_tiny_model

from .test_trl_training_step import G, compare, run_rlvr, run_trl

trl = pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")

ROWS = [{"prompt": [{"role": "user", "content": q}]} for q in ("What is 3 x 4?", "Compute 6 * 7.")]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


def fail(reason: str) -> str:
    """A tool that always fails.

    Args:
        reason: Why.
    """
    raise ValueError(f"failed because {reason}")


async def add(a: int, b: int) -> int:
    """Add two integers (an async tool: TRL shows its result after the turn's other ones).

    Args:
        a: The first term.
        b: The second term.
    """
    return a + b


TOOLS = [multiply, fail, add]


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


# the first turn of each row of a group (by position), and the turn after k tool results (by the question); the
# answer without a call is long enough that rlvr's length buckets keep a group in one micro-batch, as TRL's is (and
# 200 tokens: it fits the budget-rollback case's budget, as a real engine would cut it)
FIRST = [call("multiply", a=3, b=4), "It is 12, " + "as three fours make twelve; " * 6 + "so it is 12" + "!" * 10, call("multiply", a=6, b=7) + "\n" + call("divide", a=1, b=2),
         "Let me check. " + call("fail", reason="no reason")]
# after 3 x 4 = 12 was shown: an async call, then a sync one (TRL shows the sync result first)
BOTH = call("add", a=12, b=0) + "\n" + call("multiply", a=12, b=1)
AFTER = {1: {"3 x 4": call("multiply", a=12, b=1),
             "6 * 7": "The product is 42." + " Forty-two." * 5},
         2: {"3 x 4": "So 12.", "6 * 7": "Done: 42."}}


def reward(completions, **kwargs) -> list[float]:
    """A deterministic reward of the whole message list (the tool calls and tool messages included)."""
    return [float(sum(map(ord, json.dumps(c, sort_keys=True))) % 5) / 4 for c in completions]


class ScriptedTurns:
    """The model's turns, by what each prompt holds (module docstring); records every call's prompts."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prompts_seen: list[list[list[int]]] = []

    def __call__(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        self.prompts_seen.append([list(p) for p in prompt_ids])
        return [self.tokenizer.encode(self.turn(position, self.tokenizer.decode(ids, skip_special_tokens=False)),
                                      add_special_tokens=False) + [self.tokenizer.eos_token_id]
                for position, ids in enumerate(prompt_ids)]

    def turn(self, position: int, text: str) -> str:
        """The turn of the row at ``position`` of the batch, whose prompt so far is ``text``."""
        results = text.count("<tool_response>")
        if results == 0:
            return FIRST[position % G]
        if results == 1 and "3 x 4" in text and "<tool_response>\n12\n" in text:
            return BOTH
        return next(t for key, t in AFTER[min(results, 2)].items() if key in text)


class ScriptedEngine:
    """rlvr's engine as the trainer built it, inside the tool loop: ``generate`` returns the scripted turns cut to the
    budget it was given (the sampler's log-probs 0)."""

    def __init__(self, engine, fixed: ScriptedTurns):
        self.engine, self.fixed = engine, fixed

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, *, max_new_tokens, sampling, **seeding):
        from rlvr.rollout import Completion

        out = []
        for ids in self.fixed(prompts):
            kept = ids[:max_new_tokens]
            out.append(Completion(kept, [0.0] * len(kept), truncated=kept[-1] != self.fixed.tokenizer.eos_token_id))
        return out


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory) -> Path:
    """The tiny model (float64) whose tokenizer has Qwen2.5's chat template as TRL ships it (tools, tool role)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    folder = save_tiny_model(tmp_path_factory.mktemp("model") / "tiny", max_positions=2048)
    AutoModelForCausalLM.from_pretrained(folder).double().save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(folder)
    return folder


def observed_trl(record: list):
    """TRL's trainer whose tool loop's outcome (ids, tool mask, messages, counts) is recorded per generation."""
    def subclass(base):
        class Observed(base):
            def _tool_call_loop(self, *args, **kwargs):
                out = super()._tool_call_loop(*args, **kwargs)
                tool_mask, completions, completion_ids = out[0], out[1], out[2]
                record.append([(list(ids), list(mask), messages) for ids, mask, messages
                               in zip(completion_ids, tool_mask, completions, strict=True)])
                return out
        return Observed
    return subclass


def observed_rlvr(record: list, monkeypatch):
    """rlvr's tool loop, recording each generation's completions the same way."""
    import rlvr.train.setup as setup_module

    with_tools = setup_module.with_tools

    def recording(*args, **kwargs):
        loop = with_tools(*args, **kwargs)
        generate = loop.generate

        def observed(*a, **kw):
            completions = generate(*a, **kw)
            record.append([(list(c.token_ids), list(c.tool_mask or [1] * len(c.token_ids)),
                            [dict(m) for m in c.tool_use.messages]) for c in completions])
            return completions
        loop.generate = observed
        return loop

    monkeypatch.setattr(setup_module, "with_tools", recording)


def assert_same_generations(ours: list, theirs: list) -> None:
    """Each generation's completions (ids, tool mask, messages) as rlvr's and TRL's tool loops recorded them."""
    assert len(ours) == len(theirs) > 0
    for generation, (mine, trls) in enumerate(zip(ours, theirs)):
        for row, (a, b) in enumerate(zip(mine, trls, strict=True)):
            assert a[0] == b[0], f"generation {generation}, row {row}: completion ids differ"
            assert a[1] == b[1], f"generation {generation}, row {row}: tool masks differ"
            assert a[2] == b[2], f"generation {generation}, row {row}: messages differ"


CASES = {  # max_completion_length: 400 holds every row's turns; 200 drops a second call's result (the rollback)
    "all-fit": dict(max_completion_length=400, max_steps=2),
    "budget-rollback": dict(max_completion_length=200, max_steps=2),
    "call-limit-1": dict(max_completion_length=400, max_tool_calling_iterations=1, max_steps=2),
    # (one group a micro-batch: with two, rlvr's length buckets would mix the groups' rows, and the micro-batch
    # means of the logged entropy and clip fractions would be over other rows than TRL's positional ones)
    "dapo-mu2-beta": dict(max_completion_length=400, loss_type="dapo", num_iterations=2, epsilon=0.02, beta=0.04,
                          max_steps=4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_trls_tool_loop_is_rlvrs(name, tmp_path, tool_model, monkeypatch):
    from transformers import AutoTokenizer

    options = dict(CASES[name])
    tokenizer = AutoTokenizer.from_pretrained(tool_model)
    theirs, ours = [], []
    observed_rlvr(ours, monkeypatch)
    rlvr_run = run_rlvr(tmp_path / "rlvr", tool_model, {**options, "tools": TOOLS}, ScriptedTurns(tokenizer),
                        monkeypatch, rows=ROWS, rewards=(reward,), engine_class=ScriptedEngine)
    trl_run = run_trl(tmp_path / "trl", tool_model, options, ScriptedTurns(tokenizer), monkeypatch, rows=ROWS,
                      rewards=(reward,), tools=TOOLS, trainer_class=observed_trl(theirs))
    assert_same_generations(ours, theirs)
    k = options.get("num_iterations", 1)  # optimiser steps per generation (steps_per_generation = accumulation = 1)
    compare(trl_run, rlvr_run, k)
    generated = [line for line in trl_run.log_history if "tools/call_frequency" in line]  # (generation steps)
    assert generated and min(line["tools/call_frequency"] for line in generated) > 0
    assert max(line["tools/failure_frequency"] for line in generated) > 0
    masks = [mask for generation in theirs for _, mask, _ in generation]
    assert any(0 in mask for mask in masks)  # not vacuous: tool results were masked
    unanswered = [messages for generation in theirs for _, _, messages in generation if "tool_calls" in messages[-1]]
    # not vacuous: past the budget (or the call limit) a row ends with a call whose result was dropped (not run)
    assert bool(unanswered) == (name in ("budget-rollback", "call-limit-1"))
