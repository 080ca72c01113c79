"""The judge: prompt, reply parsing, cache, a fake backend, and the local backend on tiny-random."""

import pytest

from rlvr.rewards.scorers import (
    JUDGE_PROMPT,
    Judge,
    LocalModelBackend,
    build_prompt,
    build_scorer,
    parse_score,
)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Score: 7", 7.0),
        ("score:7", 7.0),
        ("**Score:** 8", 8.0),
        ("**Score**: 9", 9.0),
        ("Rating: 6.5", 6.5),
        ("Grade = 4", 4.0),
        ("7/10", 7.0),
        ("I would give it 3 out of 10.", 3.0),
        ("**8**", 8.0),
        ("10", 10.0),
        (" 5.\n", 5.0),
        ("Steps 1 and 2 are right, step 3 is wrong. Score: 6", 6.0),  # the labelled number wins
        ("Score: 2 ... on reflection, Score: 5", 5.0),               # the last label wins
        ("Score: 75", 10.0),                                         # clamped
        ("Score: -3", 0.0),
    ],
)
def test_parse_score(reply, expected):
    assert parse_score(reply) == expected


@pytest.mark.parametrize("reply", ["", "garbage", "The reasoning is good.", "I give it 7", "Score: high",
                                   "x" * 100_000, None, 7])
def test_parse_score_failures(reply):
    assert parse_score(reply) is None


def test_prompt_has_the_parts_and_truncates():
    prompt = build_prompt("What is 2+2?", "2 + 2 = {4}", None)
    assert "What is 2+2?" in prompt and "2 + 2 = {4}" in prompt and "Reference solution" not in prompt
    assert prompt.endswith('Reply in the form "Score: N" with N an integer from 0 to 10, and nothing else.')
    assert "Reference solution:\nUse 2+2=4." in build_prompt("q", "r", "Use 2+2=4.")
    long = build_prompt("Q" * 5000, "a" * 3000 + "END", "b" * 5000 + "ANSWER", max_chars=1000)
    assert "Q" * 1000 + "\n[... the last 4000 characters are cut ...]" in long
    assert "[... the first 2003 characters are cut ...]\n" + "a" * 997 + "END" in long
    assert "ANSWER" in long and "b" * 1001 not in long
    assert JUDGE_PROMPT.count("{") == 3  # question, response, reference_block: nothing else to format


class FakeBackend:
    """Replies from a dict keyed by a marker in the prompt; counts prompts."""

    def __init__(self, replies):
        self.replies = replies
        self.prompts = []

    def complete(self, prompts):
        self.prompts.extend(prompts)
        return [next((v for k, v in self.replies.items() if k in p), "??") for p in prompts]

    def pop_stats(self):
        return {"fake_prompts": float(len(self.prompts))}


def _call(judge, responses, references=None):
    n = len(responses)
    return judge(["q"] * n, responses, references or [None] * n, [1.0] * n)


def test_judge_scores_are_ratings_over_ten():
    backend = FakeBackend({"good": "Score: 9", "ok": "6/10", "bad": "**1**", "junk": "no number here"})
    judge = Judge(backend)
    assert _call(judge, ["good", "ok", "bad", "junk"]) == [0.9, 0.6, 0.1, None]
    stats = judge.pop_stats()
    assert stats["calls"] == 4 and stats["failures"] == 1 and stats["parse_failures"] == 1
    assert stats["fake_prompts"] == 4  # the backend's own counters are merged in


def test_judge_cache_is_bounded_lru():
    backend = FakeBackend({"a": "Score: 1", "b": "Score: 2", "c": "Score: 3"})
    judge = Judge(backend, cache_size=2)
    _call(judge, ["a", "b"])
    _call(judge, ["a"])        # hit; "a" is now the most recent
    _call(judge, ["c"])        # evicts "b"
    _call(judge, ["a", "b"])   # "a" hit, "b" asked again
    assert [p.split("Solution to grade:\n")[1][0] for p in backend.prompts] == ["a", "b", "c", "b"]
    assert judge.pop_stats()["cache_hits"] == 2


def test_judge_survives_a_broken_backend():
    class Raising:
        def complete(self, prompts):
            raise RuntimeError("boom")

    class Short:
        def complete(self, prompts):
            return ["Score: 5"]

    for backend in (Raising(), Short()):
        judge = Judge(backend)
        assert _call(judge, ["a", "b"]) == [None, None]
        assert judge.pop_stats()["request_failures"] == 2


def test_judge_rejects_a_non_backend_and_bad_options():
    with pytest.raises(TypeError, match="complete"):
        Judge(object())
    with pytest.raises(ValueError, match="cache_size"):
        Judge(FakeBackend({}), cache_size=-1)


@pytest.fixture(scope="module")
def tiny():
    from rlvr.models import load_policy

    return load_policy("tiny-random")


def test_local_backend_on_a_tiny_random_model(tiny):
    model, tokenizer = tiny
    model.train()
    backend = LocalModelBackend(model, tokenizer, max_new_tokens=8, batch_size=2)
    judge = Judge(backend)
    responses = ["2 + 2 = 4, so the answer is 4.", "I don't know.", "4"]
    scores = judge(["What is 2 + 2?"] * 3, responses, ["2 + 2 = 4", None, "4"], [1.0, 0.0, 1.0])
    assert len(scores) == 3
    assert all(s is None or 0.0 <= s <= 1.0 for s in scores)
    assert model.training  # the mode it was in
    stats = judge.pop_stats()
    assert stats["calls"] == 3 and stats["requests"] == 3 and stats["generation_errors"] == 0
    assert stats["failures"] == stats["parse_failures"] + stats["request_failures"]


def test_local_backend_pads_left_and_returns_only_the_new_text(tiny, monkeypatch):
    model, tokenizer = tiny
    seen = {}
    generate = model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return generate(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    backend = LocalModelBackend(model, tokenizer, max_new_tokens=6, batch_size=8)
    replies = backend.complete(["short", "a much longer prompt than the first one"])
    mask = seen["attention_mask"]  # [B, L]
    assert mask[0, 0] == 0 and mask[0, -1] == 1 and mask[1].all()  # the short prompt is padded left
    assert seen["generation_config"].do_sample is False
    # byte-level tokenizer: 6 new tokens decode to at most 6 characters, never the prompt
    assert all(isinstance(r, str) and len(r) <= 6 for r in replies)
    assert backend.complete(["short", "a much longer prompt than the first one"]) == replies  # greedy


def test_local_backend_generation_failure_is_counted(tiny, monkeypatch):
    model, tokenizer = tiny

    def broken(**kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(model, "generate", broken)
    judge = build_scorer("judge", backend="local", model=model, tokenizer=tokenizer, batch_size=2)
    assert _call(judge, ["a", "b", "c"]) == [None, None, None]
    assert judge.pop_stats()["generation_errors"] == 2  # two batches


def test_local_backend_truncates_prompts_from_the_left(tiny):
    model, tokenizer = tiny
    backend = LocalModelBackend(model, tokenizer, max_new_tokens=4)
    assert backend.max_prompt_tokens == 1024 - 4  # max_position_embeddings - max_new_tokens
    full = backend._encode("x" * 500 + " END")
    backend.max_prompt_tokens = 50
    ids = backend._encode("x" * 500 + " END")
    assert len(full) > 500 and ids == full[-50:]  # the end (reply instruction, template) is kept
    assert "END" in tokenizer.decode(ids)
