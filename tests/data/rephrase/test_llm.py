"""LLM rephrasing: the prompt, reply clean-up, failures, and a run on a tiny random local model."""

import json
import random

import pytest

from rlvr.data.rephrase import REPHRASE_STYLES, LLMRephraser, build_rephrase_prompt, clean_reply, rephrase_rows

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"


@pytest.mark.parametrize("reply, cleaned", [
    ("  Tom owns 3 apples.  ", "Tom owns 3 apples."),
    ('"Tom owns 3 apples."', "Tom owns 3 apples."),
    ("“Tom owns 3 apples.”", "Tom owns 3 apples."),
    ("Rewritten problem: Tom owns 3 apples.", "Tom owns 3 apples."),
    ("**Rephrased problem:** Tom owns 3 apples.", "Tom owns 3 apples."),
    ("**Rephrased:** Tom owns 3 apples.", "Tom owns 3 apples."),
    ("New: Tom owns 3 apples.", "Tom owns 3 apples."),
    ("Newton owns 3 apples.", "Newton owns 3 apples."),
    ("Here is the rewritten problem:\n\nTom owns 3 apples.", "Tom owns 3 apples."),
    ("```\nTom owns 3 apples.\n```", "Tom owns 3 apples."),
    ("Problem: Tom owns 3 apples.\n\nAnswer: 7", "Tom owns 3 apples."),
    ("Tom owns 3 apples.\nSolution: 3 + 4 = 7", "Tom owns 3 apples."),
    ("1 + 2 =\n\nRewritten answer:", "1 + 2 ="),  # seen from SmolLM2-135M
    ("- Tom owns 3 apples.\n\nQuestion: How many?", "- Tom owns 3 apples.\n\nQuestion: How many?"),
    ('"A" is for apple, "B" is for 3 bananas', '"A" is for apple, "B" is for 3 bananas'),  # not one quote
    ("Rewritten problem:", ""),
    ("   ", ""),
    (None, None),
    (42, None),
])
def test_clean_reply(reply, cleaned):
    assert clean_reply(reply) == cleaned


def test_prompt_keeps_the_question_and_the_rules_and_varies_by_candidate():
    prompts = [build_rephrase_prompt(QUESTION, k) for k in range(len(REPHRASE_STYLES) + 1)]
    assert all(QUESTION in p and "in digits" in p and "Do not solve" in p for p in prompts)
    assert len(set(prompts)) == len(REPHRASE_STYLES) and prompts[0] == prompts[-1]


class FakeBackend:
    def __init__(self, replies):
        self.replies = replies
        self.prompts = []

    def complete(self, prompts):
        self.prompts.append(prompts)
        return self.replies(prompts) if callable(self.replies) else list(self.replies)


def test_llm_rephraser_cleans_replies_and_pipeline_filters_them(tmp_path):
    replies = [
        "Rewritten problem: Tom owns 3 apples and gets 4 more. How many apples does he own now?",
        "Tom has 3 apples and buys 4 more. How many apples does he have?",  # unchanged
        "Tom has three apples and buys 4 more. How many does he have?",  # spelled out
        "Tom has 3 apples and buys 4 more, so he has 7.",  # solved
        None,  # request failed
        "- Tom has 3 apples.\n- He buys 4 more.\n\nHow many apples does he have?",
    ]
    backend = FakeBackend(replies)
    rows = [{"id": "q", "prompt": QUESTION, "answer": "7"}]
    path = tmp_path / "out.jsonl"
    tally = rephrase_rows(rows, LLMRephraser(backend), n=3, k=6, out_path=path, progress=False)
    record = json.loads(path.read_text())
    assert record["rephrasings"] == [
        "Tom owns 3 apples and gets 4 more. How many apples does he own now?",
        "- Tom has 3 apples.\n- He buys 4 more.\n\nHow many apples does he have?",
    ]
    assert record["rejected"] == {"changed_numbers": 2, "no_output": 1, "unchanged": 1}
    assert len(backend.prompts) == 1 and len(backend.prompts[0]) == 6  # one batch per question
    assert tally.kept == {2: 1}


@pytest.mark.parametrize("replies", [lambda prompts: 1 / 0, ["only one reply"]])
def test_a_broken_backend_costs_the_candidates_not_the_run(replies):
    rephraser = LLMRephraser(FakeBackend(replies))
    assert rephraser.rephrase(QUESTION, [random.Random(k) for k in range(3)]) == [None, None, None]


def test_a_backend_without_complete_is_rejected():
    with pytest.raises(TypeError, match="complete"):
        LLMRephraser(object())


def test_local_model_backend_on_a_tiny_random_model_runs_and_rejects_garbage(tmp_path):
    from rlvr.models import load_policy
    from rlvr.rewards.scorers import LocalModelBackend

    model, tokenizer = load_policy("tiny-random")
    backend = LocalModelBackend(model, tokenizer, max_new_tokens=12, batch_size=4)
    rows = [{"id": "q", "prompt": QUESTION, "answer": "7"}]
    path = tmp_path / "out.jsonl"
    tally = rephrase_rows(rows, LLMRephraser(backend), n=2, k=4, out_path=path, progress=False)
    record = json.loads(path.read_text())
    assert record["id"] == "q"
    assert record["rephrasings"] == []  # random tokens (here: blank lines) keep neither 3 nor 4
    assert sum(record["rejected"].values()) == 4 and "no_output" not in record["rejected"]
    assert tally.kept == {0: 1}




def _http_rephraser(server):
    from rlvr.rewards.scorers import OpenAIChatBackend

    # max_workers=1: candidates are requested one after another, so the script is consumed in order.
    backend = OpenAIChatBackend(server.base_url, "m", timeout_s=0.3, max_retries=1, backoff_s=0.0, max_workers=1)
    return LLMRephraser(backend), backend


def test_a_hanging_garbage_or_failing_server_drops_those_candidates_and_counts_them(server, tmp_path):
    good = "Tom owns 3 apples and gets 4 more. How many apples does he own now?"
    server.script = [
        ("hang", None), ("hang", None),           # candidate 0: times out, retried once, dropped
        ("raw", "{not json"),                     # candidate 1: garbage, not retried
        ("raw", '{"object": "error"}'),           # candidate 2: JSON without choices
        ("status", 500), ("status", 503),         # candidate 3: 5xx, retried once, dropped
        ("ok", f"Rewritten problem: {good}"),     # candidate 4
    ]
    rephraser, backend = _http_rephraser(server)
    path = tmp_path / "out.jsonl"
    tally = rephrase_rows([{"id": "q", "prompt": QUESTION, "answer": "7"}], rephraser, n=3, k=5,
                          out_path=path, progress=False)
    record = json.loads(path.read_text())
    assert record == {"id": "q", "rephrasings": [good], "rejected": {"no_output": 4}}
    assert tally.kept == {1: 1} and tally.rejected == {"no_output": 4}
    assert len(server.requests) == 7  # bounded: 1 + max_retries tries for the retryable failures
    stats = backend.pop_stats()
    assert (stats["timeouts"], stats["bad_replies"], stats["http_errors"], stats["retries"]) == (2, 2, 2, 2)


def test_a_server_that_always_fails_writes_nothing_and_the_question_is_retried_later(server, tmp_path):
    server.default = ("status", 502)
    rephraser, _ = _http_rephraser(server)
    path = tmp_path / "out.jsonl"
    rows = [{"id": "q", "prompt": QUESTION, "answer": "7"}]
    tally = rephrase_rows(rows, rephraser, n=2, k=3, out_path=path, progress=False)
    assert tally.no_candidates == 1 and tally.questions == 0
    assert path.read_text() == ""  # no line: a rerun asks again
    assert len(server.requests) == 3 * 2
    server.default = ("ok", "Tom owns 3 apples and gets 4 more. How many apples does he own now?")
    assert rephrase_rows(rows, rephraser, n=2, k=3, out_path=path, progress=False).questions == 1
    assert json.loads(path.read_text())["id"] == "q"


def test_a_connection_error_stops_the_run_and_keeps_the_lines_written(tmp_path):
    # A back end raising ConnectionError (OpenAIChatBackend's EndpointDown) says the endpoint is down.
    calls = []

    def replies(prompts):
        calls.append(prompts)
        if len(calls) > 1:
            raise ConnectionError("5 requests in a row to http://127.0.0.1:1/v1/chat/completions failed")
        return ["Tom owns 3 apples and gets 4 more. How many apples does he own now?"] * len(prompts)

    rows = [{"id": str(i), "prompt": QUESTION, "answer": "7"} for i in range(4)]
    path = tmp_path / "out.jsonl"
    with pytest.raises(ConnectionError, match="in a row"):
        rephrase_rows(rows, LLMRephraser(FakeBackend(replies)), n=1, k=2, out_path=path, progress=False)
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["0"]
    assert len(calls) == 2  # stopped at the first failing question, not walked through the rest
