"""The judge over OpenAIChatBackend against a real HTTP server on 127.0.0.1 (a thread per test)."""

import json
import logging
import pickle
import time

import pytest

from rlvr.rewards.bounded_http import EndpointDown
from rlvr.rewards.scorers import Judge, OpenAIChatBackend, build_scorer
from tests.helpers.openai_server import FakeServer

KEY = "sk-test-not-a-real-key-3141"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", KEY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    fake = FakeServer()
    yield fake
    fake.close()


def _judge(server, **options):
    backend = OpenAIChatBackend(server.base_url, "judge-model", api_key_env="JUDGE_TEST_KEY",
                                backoff_s=0.0, **options)
    return Judge(backend)


def _call(judge, responses, references=None):
    n = len(responses)
    return judge(["What is 6 * 7?"] * n, responses, references or [None] * n, [0.0] * n)


def test_good_replies_in_order_with_the_key_from_the_environment(server):
    judge = _judge(server, max_workers=4)
    responses = [f"6 * 7 = 42 [rate {n}]" for n in (7, 0, 10, 3, 9)]
    assert _call(judge, responses) == [0.7, 0.0, 1.0, 0.3, 0.9]
    assert len(server.requests) == 5
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert body["model"] == "judge-model" and body["temperature"] == 0 and body["max_tokens"] == 16
    assert body["messages"][0]["role"] == "user"
    stats = judge.pop_stats()
    assert stats["requests"] == 5 and stats["failures"] == 0 and stats["http_errors"] == 0


def test_the_key_is_read_at_call_time_and_never_shown(server, monkeypatch):
    judge = _judge(server)
    monkeypatch.setenv("JUDGE_TEST_KEY", KEY + "-rotated")
    _call(judge, ["[rate 5]"])
    assert server.requests[-1][1]["Authorization"] == f"Bearer {KEY}-rotated"
    shown = repr(judge) + str(judge.backend) + repr(judge.backend) + str(judge.pop_stats())
    assert "JUDGE_TEST_KEY" in shown and KEY not in shown
    assert KEY.encode() not in pickle.dumps(judge.backend)
    assert KEY not in json.dumps(vars(judge.backend), default=repr)


def test_no_authorization_header_without_a_key(server, monkeypatch):
    monkeypatch.delenv("JUDGE_TEST_KEY")
    assert _call(_judge(server), ["[rate 4]"]) == [0.4]
    assert "Authorization" not in server.requests[0][1]


def test_the_reference_is_in_the_prompt_when_given(server):
    _call(_judge(server), ["[rate 8]", "[rate 8] too"], ["REFERENCE-SOLUTION-TEXT", None])
    prompts = [body["messages"][0]["content"] for _, _, body in server.requests]
    assert sum("REFERENCE-SOLUTION-TEXT" in p for p in prompts) == 1
    assert all("What is 6 * 7?" in p and 'Score: N' in p for p in prompts)


@pytest.mark.parametrize(
    ("action", "stat"),
    [
        (("raw", "{not json"), "bad_replies"),
        (("raw", ""), "bad_replies"),
        (("raw", "<html><body>502 Bad Gateway</body></html>"), "bad_replies"),
        (("raw", '{"object": "error", "message": "model overloaded"}'), "bad_replies"),  # no choices
        (("raw", '{"choices": []}'), "bad_replies"),
        (("raw", '{"choices": null}'), "bad_replies"),
        (("raw", '{"choices": [{"text": "Score: 7"}]}'), "bad_replies"),  # completions API shape
        (("raw", '{"choices": [{"message": {"content": 7}}]}'), "bad_replies"),  # content not text
        (("raw", "[1, 2]"), "bad_replies"),
        (("raw", "null"), "bad_replies"),
        (("ok", None), "bad_replies"),  # content null
        (("ok", "The reasoning is fine overall."), "parse_failures"),
    ],
)
def test_unusable_replies_fail_without_retry(server, action, stat):
    server.script = [action]
    judge = _judge(server)
    assert _call(judge, ["[rate 6]"]) == [None]
    stats = judge.pop_stats()
    assert len(server.requests) == 1 and stats["retries"] == 0
    assert stats[stat] == 1 and stats["failures"] == 1


def test_a_5xx_is_retried_then_succeeds(server):
    server.script = [("status", 500), ("status", 503)]
    judge = _judge(server, max_retries=2)
    assert _call(judge, ["[rate 6]"]) == [0.6]
    stats = judge.pop_stats()
    assert len(server.requests) == 3
    assert (stats["retries"], stats["http_errors"], stats["failures"]) == (2, 2, 0)


def test_a_429_is_retried(server):
    server.script = [("status", 429)]
    assert _call(_judge(server, max_retries=1), ["[rate 2]"]) == [0.2]
    assert len(server.requests) == 2


def test_always_500_fails_after_bounded_retries(server):
    server.default = ("status", 500)
    judge = _judge(server, max_retries=2)
    assert _call(judge, ["[rate 6]", "[rate 7]"]) == [None, None]
    stats = judge.pop_stats()
    assert len(server.requests) == 2 * 3  # 1 try + 2 retries each
    assert stats["request_failures"] == 2 and stats["failures"] == 2 and stats["http_errors"] == 6
    assert stats["retries"] == 4


@pytest.mark.parametrize("code", [400, 401, 403, 404])
def test_a_4xx_is_not_retried(server, code):
    server.default = ("status", code)
    judge = _judge(server, max_retries=3)
    assert _call(judge, ["[rate 6]"]) == [None]
    assert len(server.requests) == 1
    stats = judge.pop_stats()
    assert stats["retries"] == 0 and stats["http_errors"] == 1 and stats["request_failures"] == 1


def test_a_hanging_server_times_out(server):
    server.default = ("hang", None)
    judge = _judge(server, timeout_s=0.3, max_retries=1)
    assert _call(judge, ["[rate 6]"]) == [None]
    stats = judge.pop_stats()
    assert len(server.requests) == 2 and stats["timeouts"] == 2 and stats["failures"] == 1


def test_a_hang_then_success(server):
    server.script = [("hang", None)]
    assert _call(_judge(server, timeout_s=0.3, max_retries=1), ["[rate 9]"]) == [0.9]


def test_connection_refused_is_a_counted_failure():
    fake = FakeServer()
    url = fake.base_url
    fake.close()  # nothing listens on the port any more
    judge = Judge(OpenAIChatBackend(url, "m", max_retries=1, backoff_s=0.0, timeout_s=1.0))
    assert _call(judge, ["[rate 1]"]) == [None]
    stats = judge.pop_stats()
    assert stats["connection_errors"] == 2 and stats["failures"] == 1


def test_cache_hits_skip_the_server(server):
    judge = _judge(server)
    responses = ["A [rate 7]", "B [rate 2]", "A [rate 7]"]  # the third is a duplicate of the first
    assert _call(judge, responses) == [0.7, 0.2, 0.7]
    assert len(server.requests) == 2
    assert _call(judge, responses) == [0.7, 0.2, 0.7]
    assert len(server.requests) == 2
    stats = judge.pop_stats()
    assert stats["cache_hits"] == 1 + 3 and stats["requests"] == 2 and stats["calls"] == 6
    # a different question or reference is a different key
    judge(["another question"], ["A [rate 7]"], [None], [0.0])
    judge(["What is 6 * 7?"], ["A [rate 7]"], ["a reference"], [0.0])
    assert len(server.requests) == 4


def test_failures_are_not_cached(server):
    server.script = [("status", 401)]
    judge = _judge(server)
    assert _call(judge, ["[rate 5]"]) == [None]
    assert _call(judge, ["[rate 5]"]) == [0.5]


def test_build_scorer_makes_an_openai_judge(server):
    judge = build_scorer("judge", backend="openai", base_url=server.base_url, model="m",
                         api_key_env="JUDGE_TEST_KEY", cache_size=10)
    assert isinstance(judge.backend, OpenAIChatBackend) and judge.cache_size == 10
    assert _call(judge, ["[rate 3]"]) == [0.3]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "127.0.0.1:8000/v1"}, "http:// or https://"),
        ({"model": ""}, "model must be"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_workers": 0}, "max_workers"),
    ],
)
def test_backend_options_are_validated(kwargs, message):
    options = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError, match=message):
        OpenAIChatBackend(**options)


# Bounded calls: judge_timeout is a deadline for the whole request, and a reply has a size cap.

TRICKLED = "Score: 7" + " " * 200  # a reply of ~280 bytes: at 0.05 s a byte it would take ~14 s


@pytest.mark.parametrize("action", ["trickle", "trickle_body"])
def test_a_trickling_server_is_cut_at_the_deadline(server, action):
    # A byte every 0.05 s never trips a per-read timeout of 1 s; the total deadline cuts it at ~1 s.
    server.script = [(action, (0.05, TRICKLED))]
    judge = _judge(server, timeout_s=1.0, max_retries=0)
    start = time.monotonic()
    assert _call(judge, ["[rate 6]"]) == [None]
    elapsed = time.monotonic() - start
    assert elapsed < 3 * 1.0, f"a 1 s deadline took {elapsed:.1f} s"  # a loose bound, not a benchmark
    stats = judge.pop_stats()
    assert stats["timeouts"] == 1 and stats["failures"] == 1


def test_a_slow_but_complete_reply_within_the_deadline_is_used(server):
    server.script = [("trickle_body", (0.001, "Score: 8"))]
    assert _call(_judge(server, timeout_s=10.0, max_retries=0), ["[rate 6]"]) == [0.8]


def _wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


@pytest.mark.parametrize("declare_length", [True, False])
def test_a_huge_reply_is_dropped_without_reading_it(server, declare_length):
    huge = 200 << 20  # 200 MiB; the cap is 1 MiB
    server.script = [("huge", (huge, declare_length))]
    judge = _judge(server, max_retries=2)
    assert _call(judge, ["[rate 6]"]) == [None]
    stats = judge.pop_stats()
    assert stats["bad_replies"] == 1 and stats["retries"] == 0 and len(server.requests) == 1
    assert _wait_for(lambda: server.sent), "the server never saw the client go away"
    # what the server got out before the client closed: the cap plus socket buffers, not 200 MiB
    assert server.sent[0] < 64 << 20, f"{server.sent[0]} bytes were sent: the reply was read on"


def test_a_small_size_cap_drops_a_normal_reply(server):
    judge = _judge(server, max_reply_bytes=10)
    assert _call(judge, ["[rate 6]"]) == [None]
    assert judge.pop_stats()["bad_replies"] == 1


def test_a_failing_endpoint_is_logged_once_with_host_cause_and_fallback(server, caplog):
    server.default = ("status", 500)
    judge = _judge(server, max_retries=1)
    host = server.base_url.split("/")[2]
    with caplog.at_level(logging.DEBUG, logger="rlvr.rewards.scorers.judge_backends"):
        for _ in range(3):
            assert _call(judge, ["[rate 1]", "[rate 2]"]) == [None, None]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert host in warnings[0] and "HTTP 500" in warnings[0] and "s = r" in warnings[0]
    assert judge.pop_stats()["request_failures"] == 6


def test_a_refused_connection_is_named_in_the_one_warning(caplog):
    fake = FakeServer()
    url = fake.base_url
    fake.close()
    judge = Judge(OpenAIChatBackend(url, "m", max_retries=0, backoff_s=0.0, timeout_s=1.0))
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.scorers.judge_backends"):
        _call(judge, ["[rate 1]", "[rate 2]", "[rate 3]"])
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "Connection refused" in warning and url.split("/")[2] in warning


def test_give_up_after_raises_endpoint_down_and_skips_the_queue():
    fake = FakeServer()
    url = fake.base_url
    fake.close()
    backend = OpenAIChatBackend(url, "m", max_retries=3, backoff_s=0.0, timeout_s=1.0, max_workers=1,
                                give_up_after=2)
    with pytest.raises(EndpointDown, match="2 requests in a row to .* failed") as info:
        backend.complete(["a", "b", "c", "d", "e"])
    assert isinstance(info.value, ConnectionError)  # what rlvr.data lets through
    # two prompts tried 1 + 3 times each; the three queued after them are not tried at all
    assert backend.pop_stats()["connection_errors"] == 2 * 4


def test_without_give_up_after_the_backend_never_raises():
    fake = FakeServer()
    url = fake.base_url
    fake.close()
    backend = OpenAIChatBackend(url, "m", max_retries=0, backoff_s=0.0, timeout_s=1.0)
    assert backend.complete(["a"] * 12) == [None] * 12
