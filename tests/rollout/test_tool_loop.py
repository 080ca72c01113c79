"""Multi-turn rollouts (rlvr.rollout.tool_loop): a scripted engine writes the turns, so the response, its tool mask,
its log-probs and the prompts each turn was generated from are checked against a hand-worked example."""

from __future__ import annotations

import threading

import pytest

from rlvr.models.tiny import tiny_byte_tokenizer
from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling
from rlvr.rollout.tool_loop import MarkdownPython, ToolCall, ToolLoop, ToolResult, Turn
from tests.helpers.engines import local_engines

TOKENIZER = tiny_byte_tokenizer()
EOS = TOKENIZER.convert_tokens_to_ids("<|im_end|>")


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


def text(tokens) -> str:
    return TOKENIZER.decode(list(tokens), skip_special_tokens=False)


class Scripted:
    """An engine whose turn n of a row is ``script[row_key][n]`` (the row keyed by its prompt's first character),
    each token's log-prob -0.5; it records every prompt it was asked to continue."""

    supports_row_seeds = True

    def __init__(self, script: dict[str, list[str]]):
        self.script, self.calls = script, []
        self.eos_token_ids = [EOS]

    def generate(self, prompts, *, max_new_tokens, sampling, generator_seed=None, row_seeds=None):
        self.calls.append(([text(p) for p in prompts], max_new_tokens, row_seeds))
        out = []
        for prompt in prompts:
            whole = text(prompt)
            turn = self.script[whole[0]][whole.count("```output")]
            tokens = ids(turn)
            if turn.endswith("<END>"):
                tokens = ids(turn[: -len("<END>")]) + [EOS]
            truncated = len(tokens) > max_new_tokens
            tokens = tokens[:max_new_tokens]
            out.append(Completion(tokens, [-0.5] * len(tokens), truncated))
        return out

    def sync_weights(self):
        pass


def echo_runner(log):
    """A tool runner that runs nothing: it shows what it was asked (the code, and the earlier cells' count)."""
    def run(calls):
        log.append(calls)
        return [ToolResult(f"ran {call.arguments['code'].strip()} after {len(call.history)}") for call in calls]
    return run


def loop(engine, log, **options):
    return ToolLoop(engine, TOKENIZER, {"python": echo_runner(log)}, tool_format=MarkdownPython(TOKENIZER), **options)


SAMPLING = Sampling(temperature=1.0)


def test_a_call_is_cut_run_shown_and_generation_resumes_with_a_mask_over_the_result():
    engine = Scripted({
        "A": ["Compute.\n```python\nprint(6*7)\n```\nI guess 41<END>", "So the answer is 42.<END>"],
        "B": ["No tool needed: 3.<END>"],
    })
    log = []
    out = loop(engine, log).generate([ids("A?"), ids("B?")], max_new_tokens=200, sampling=SAMPLING, row_seeds=[7, 8])
    call = "Compute.\n```python\nprint(6*7)\n```"
    shown = "\n```output\nran print(6*7) after 0\n```\n"
    # the model's words after the call are gone; the result follows the call; the next turn follows the result
    assert text(out[0].token_ids) == call + shown + "So the answer is 42.<|im_end|>"
    assert list(out[0].tool_mask) == [1] * len(ids(call)) + [0] * len(ids(shown)) + [1] * (len(ids("So the answer is 42.")) + 1)
    assert list(out[0].logprobs) == [-0.5] * len(ids(call)) + [0.0] * len(ids(shown)) + [-0.5] * (len(ids("So the answer is 42.")) + 1)
    assert not out[0].truncated
    # a row without a call is untouched, and not generated again; the second turn continues prompt + response
    assert text(out[1].token_ids) == "No tool needed: 3.<|im_end|>" and out[1].tool_mask is None
    assert out[1].tool_use.calls == 0 and out[0].tool_use.calls == 1 and out[0].tool_use.failures == 0
    (first, _, _), (second_prompts, budget, seeds) = engine.calls
    assert first == ["A?", "B?"]
    assert second_prompts == ["A?" + call + shown]
    assert budget == 200 - len(ids(call + shown)) and seeds != [7]
    assert [c.arguments["code"] for c in log[0]] == ["print(6*7)\n"]


def test_a_later_call_sees_the_earlier_cells_and_the_call_limit_keeps_the_last_turn_as_written():
    turns = ["```python\nx = 1\n```<END>", "```python\nx += 1\n```<END>", "```python\nprint(x)\n```\ntail<END>", "done<END>"]
    log = []
    out = loop(Scripted({"A": turns}), log).generate([ids("A")], max_new_tokens=500, sampling=SAMPLING,
                                                    row_seeds=[1])
    assert [len(call.history) for round_ in log for call in round_] == [0, 1, 2]
    assert text(out[0].token_ids).endswith("ran print(x) after 2\n```\ndone<|im_end|>")
    log.clear()
    limited = loop(Scripted({"A": turns}), log, max_tool_calling_iterations=2)
    out = limited.generate([ids("A")], max_new_tokens=500, sampling=SAMPLING, row_seeds=[1])
    assert len(log) == 2  # the third call is not run: its turn is kept whole, the model's tokens all trained on
    assert text(out[0].token_ids).endswith("```python\nprint(x)\n```\ntail<|im_end|>")
    assert out[0].tool_mask[-len(ids("```python\nprint(x)\n```\ntail")) - 1:] == (1,) * (len(ids("```python\nprint(x)\n```\ntail")) + 1)
    assert out[0].tool_use.calls == 2 and out[0].tool_use.cut_by_call_limit


CALL, SHOWN = "```python\nprint(1)\n```", "\n```output\nran print(1) after 0\n```\n"


@pytest.mark.parametrize(("room", "expected_end"), [(-1, CALL + "<|im_end|>"), (0, SHOWN), (8, SHOWN + "final an")])
def test_the_completion_budget_drops_a_result_that_does_not_fit_and_cuts_the_next_turn(room, expected_end):
    """TRL's boundary: call + result one token past the budget, the result is dropped and the response ends with the
    turn as written (TRL's rollback); filling the budget exactly, the result is kept and the response ends with it
    (no next turn, truncated); 8 tokens of room, the next turn is cut at the budget (truncated)."""
    budget = len(ids(CALL + SHOWN)) + room
    engine = Scripted({"A": [CALL + "<END>", "final answer is 1<END>"]})
    looped = loop(engine, [])
    (out,) = looped.generate([ids("A")], max_new_tokens=budget, sampling=SAMPLING, row_seeds=[3])
    assert text(out.token_ids).endswith(expected_end) and len(out.token_ids) <= budget
    assert out.truncated == (room >= 0)
    assert out.tool_use.result_dropped == (room < 0) and out.tool_use.calls == 1
    assert len(engine.calls) == (2 if room > 0 else 1)  # no turn is generated without room


def test_the_engines_abilities_and_weights_are_the_engines():
    engine = Scripted({"A": ["x<END>"]})
    looped = loop(engine, [])
    assert looped.supports_row_seeds is True and looped.eos_token_ids == [EOS]


ROWS_SCRIPT = {"A": ["```python\na = 1\n```<END>", "```python\na += 1\n```<END>", "A done<END>"],
               "B": ["no call<END>"],
               "C": ["```python\nc = 3\n```\nignored<END>", "C done<END>"],
               "D": ["```python\nd = 4\n```<END>", "```python\nd\n```<END>", "```python\nd * 2\n```<END>", "D<END>"]}


def _outcome(out):
    return [(c.token_ids, c.logprobs, c.tool_mask, c.truncated, c.tool_use.calls, c.tool_use.cut_by_call_limit)
            for c in out]


@pytest.mark.parametrize("limit", [None, 2])
def test_rows_scheduling_gives_the_tokens_of_rounds_with_each_rows_seeds(limit):
    """Each row's k-th continuation is drawn with round k's seed in both schedules, so a scripted (batch-independent)
    engine gives the same responses, call limits and budgets, turn by turn."""
    prompts, seeds = [ids(k + "?") for k in "ABCD"], [11, 12, 13, 14]
    outs, asked = {}, {}
    for scheduling in ("rounds", "rows"):
        engine, log = Scripted(ROWS_SCRIPT), []
        looped = loop(engine, log, scheduling=scheduling, tool_workers=4, max_tool_calling_iterations=limit)
        outs[scheduling] = looped.generate(prompts, max_new_tokens=300, sampling=SAMPLING, row_seeds=seeds)
        asked[scheduling] = sorted((p, s) for prompts_, _, seeds_ in engine.calls for p, s in zip(prompts_, seeds_))
    assert _outcome(outs["rows"]) == _outcome(outs["rounds"])
    assert asked["rows"] == asked["rounds"]  # every prompt each turn continued, with the same seed
    assert [c.tool_use.calls for c in outs["rows"]] == ([2, 0, 1, 3] if limit is None else [2, 0, 1, 2])


def _released_by_the_engine(scheduling: str, timeout: float) -> bool:
    """Row A's call blocks until the engine is asked for row C's next turn (or ``timeout``): whether it was."""
    released, outcome = threading.Event(), []

    class Watching(Scripted):
        def generate(self, prompts, **kwargs):
            if any(text(p).startswith("C") and "```output" in text(p) for p in prompts):
                released.set()
            return super().generate(prompts, **kwargs)

    def run(calls):
        if any("a = 1" in call.arguments["code"] for call in calls):
            outcome.append(released.wait(timeout=timeout))
        return [ToolResult("ok") for _ in calls]

    script = {"A": ROWS_SCRIPT["A"][:1] + ["A done<END>"], "C": ROWS_SCRIPT["C"]}
    looped = ToolLoop(Watching(script), TOKENIZER, {"python": run}, tool_format=MarkdownPython(TOKENIZER),
                      scheduling=scheduling, tool_workers=2)
    out = looped.generate([ids("A?"), ids("C?")], max_new_tokens=300, sampling=SAMPLING, row_seeds=[1, 2])
    assert [text(c.token_ids).endswith(f"{k} done<|im_end|>") for k, c in zip("AC", out)] == [True, True]
    (released_in_time,) = outcome
    return released_in_time


def test_with_rows_a_slow_call_holds_back_only_its_row_and_runs_while_the_others_generate():
    """With rows scheduling, C's fast call came back and C's next turn was generated while A's call still ran; with
    rounds the next turns wait for every call of the round."""
    assert _released_by_the_engine("rows", timeout=5)
    assert not _released_by_the_engine("rounds", timeout=0.3)


def test_rows_scheduling_needs_an_engine_that_seeds_each_row():
    engine = Scripted({})
    engine.supports_row_seeds = False
    with pytest.raises(ValueError, match="tool_scheduling=rows needs an engine that seeds each row"):
        loop(engine, [], scheduling="rows")


class FirstTurnCalls:
    """A first turn's first 5 tokens are a call to ``echo`` (a random model writes no call syntax); later turns
    call nothing."""

    def parse_turn(self, context, turn):
        return Turn(min(5, len(turn)), (ToolCall("echo", {}),) if "ABC" not in text(context) else ())

    def result_ids(self, turn, calls, results):
        return ids("ABC\n")

    def missing_tool(self, name, known):
        return ToolResult("no such tool", failed=True)


@pytest.mark.parametrize("engine_name", local_engines())
def test_every_engine_continues_after_a_result_with_the_trainers_logprobs(engine_name):
    """rlvr's decoder and transformers' generate in the loop (vLLM: tests/rollout/test_vllm_tools.py): the model's
    tokens after a result are sampled on the whole context, their log-probs the trainer's; the result's are 0."""
    import torch

    from rlvr.models import tiny_random_model_and_tokenizer
    from rlvr.rollout import build_engine
    from rlvr.train.batching import response_logprobs_no_grad

    model, tokenizer = tiny_random_model_and_tokenizer(seed=4)
    model.eval()
    engine = build_engine(engine_name, model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[EOS])
    looped = ToolLoop(engine, TOKENIZER, {"echo": lambda calls: [ToolResult("ABC") for _ in calls]},
                      tool_format=FirstTurnCalls())
    prompts = [ids("What is 2 + 2?"), ids("Name a colour.")] * 2
    seeding = {"row_seeds": [1, 2, 3, 4]} if engine.supports_row_seeds else {"generator_seed": 5}
    out = looped.generate(prompts, max_new_tokens=24, sampling=Sampling(0.8), **seeding)
    shown = ids("ABC\n")
    scored = response_logprobs_no_grad(model, prompts, [c.token_ids for c in out], pad_token_id=tokenizer.pad_token_id,
                                       temperature=0.8, micro_batch_size=1)
    for completion, logprobs in zip(out, scored):
        assert completion.token_ids[5:5 + len(shown)] == shown and completion.tool_mask[5:5 + len(shown)] == (0,) * 4
        assert len(completion.token_ids) > 5 + len(shown)  # the model went on after the result
        model_tokens = torch.tensor(completion.tool_mask, dtype=torch.bool)
        assert completion.logprobs[5:5 + len(shown)] == [0.0] * len(shown)
        torch.testing.assert_close(torch.tensor(completion.logprobs)[model_tokens], logprobs[model_tokens],
                                   rtol=1e-4, atol=1e-4)
