"""Options may name the env var that holds an API key, never hold the key (rlvr.rewards.api_keys)."""

import logging

import pytest

from rlvr.config import build_config
from rlvr.rewards.api_keys import check_api_key_env, check_base_url
from rlvr.rewards.scorers import OpenAIChatBackend

KEY = "sk-proj-Abc123-not-a-real-key"


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "JUDGE_KEY_2", "_private", "my_key"])
def test_env_var_names_pass(name):
    check_api_key_env(name, "api_key_env")


@pytest.mark.parametrize("value", [KEY, "hf_AbCdEf0123456789", "sk_live_0123", "ghp_0123abcd", "", "1ABC",
                                   "OPENAI API KEY", None])
def test_a_key_instead_of_a_name_is_refused_without_repeating_it(value):
    with pytest.raises(ValueError) as info:
        check_api_key_env(value, "judge_api_key_env")
    message = str(info.value)
    assert "judge_api_key_env must be the name of an environment variable" in message
    assert "export OPENAI_API_KEY=..." in message
    assert not value or value not in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://api.openai.com/v1", "http://host/v1/"])
def test_plain_base_urls_pass(url):
    check_base_url(url, "base_url")


@pytest.mark.parametrize("url", [f"https://user:{KEY}@api.example.com/v1", f"https://{KEY}@api.example.com/v1",
                                 f"https://api.example.com/v1?api_key={KEY}", f"https://api.example.com/v1#{KEY}"])
def test_credentials_in_a_base_url_are_refused_without_repeating_them(url):
    with pytest.raises(ValueError, match="plain base URL") as info:
        check_base_url(url, "judge_base_url")
    assert KEY not in str(info.value)


def test_the_config_and_the_backend_use_the_checks():
    with pytest.raises(ValueError, match="judge_api_key_env must be the name") as info:
        build_config({"judge_api_key_env": KEY})
    assert KEY not in str(info.value)
    with pytest.raises(ValueError, match="judge_base_url must be a plain base URL"):
        build_config({"scorer": "judge", "judge_base_url": f"https://u:{KEY}@h/v1", "judge_model_name": "m"})
    with pytest.raises(ValueError, match="api_key_env must be the name"):
        OpenAIChatBackend("http://127.0.0.1:1/v1", "m", api_key_env=KEY)
    with pytest.raises(ValueError, match="base_url must be a plain base URL"):
        OpenAIChatBackend(f"http://127.0.0.1:1/v1?key={KEY}", "m")


# Where a set key may be sent (check_key_destination): https anywhere, plain http only to loopback.

SECRET = "sk-test-not-a-real-key-1618"


@pytest.fixture
def key_set(monkeypatch):
    from rlvr.rewards import api_keys

    monkeypatch.setattr(api_keys, "_warned", set(), raising=False)  # warn-once state: fresh for each test
    monkeypatch.setenv("RLVR_TEST_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return "RLVR_TEST_KEY"


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000/v1", "http://judge.example.com/v1", "http://0.0.0.0:8000/v1",
                                 "http://[2001:db8::1]:8000/v1", "http://127.0.0.1.example.com/v1"])
def test_a_key_over_plain_http_to_another_host_is_refused_with_the_fix(key_set, url):
    with pytest.raises(ValueError, match="refusing to send the API key in \\$RLVR_TEST_KEY over plain http://") as info:
        OpenAIChatBackend(url, "m", api_key_env=key_set)
    message = str(info.value)
    assert "https://" in message and "unset RLVR_TEST_KEY" in message
    assert "judge_allow_plain_http=true" in message and "--allow-plain-http" in message
    assert SECRET not in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://127.8.9.10/v1", "http://localhost:8000/v1",
                                 "http://LOCALHOST/v1", "http://[::1]:8000/v1"])
def test_loopback_over_plain_http_is_fine(key_set, url, caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.api_keys"):
        OpenAIChatBackend(url, "m", api_key_env=key_set)
    assert not caplog.records


def test_allow_plain_http_lets_it_through_with_one_warning(key_set, caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.api_keys"):
        for _ in range(3):
            backend = OpenAIChatBackend("http://10.1.2.3:8000/v1", "m", api_key_env=key_set, allow_plain_http=True)
    assert backend._headers()["Authorization"] == f"Bearer {SECRET}"
    (record,) = caplog.records
    assert "plain http:// to 10.1.2.3, as allowed explicitly" in record.getMessage()


def test_without_the_key_nothing_is_sent_and_nothing_is_refused(key_set, monkeypatch):
    monkeypatch.delenv(key_set)
    backend = OpenAIChatBackend("http://10.1.2.3:8000/v1", "m", api_key_env=key_set)
    assert "Authorization" not in backend._headers()
    monkeypatch.setenv(key_set, SECRET)  # set after start-up, on a refused transport: still not sent
    assert "Authorization" not in backend._headers()


def test_an_https_host_that_is_not_the_keys_provider_warns_once(key_set, caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.api_keys"):
        for _ in range(3):
            OpenAIChatBackend("https://api.together.example/v1", "m")  # api_key_env=OPENAI_API_KEY
        OpenAIChatBackend("https://api.openai.com/v1", "m")  # its own provider: no warning
        OpenAIChatBackend("https://api.together.example/v1", "m", api_key_env=key_set)  # no known provider
    (record,) = caplog.records
    message = record.getMessage()
    assert "$OPENAI_API_KEY is set and will be sent to api.together.example, which is not api.openai.com" in message
    assert SECRET not in message


def test_the_judge_config_option_reaches_the_backend(key_set):
    from rlvr.train.setup import build_scorer

    options = {"scorer": "judge", "judge_base_url": "http://10.1.2.3:8000/v1", "judge_model_name": "m",
               "judge_api_key_env": key_set}
    assert build_config(options).dagrpo.judge_allow_plain_http is False
    with pytest.raises(ValueError, match="judge_allow_plain_http=true"):
        build_scorer(build_config(options), device="cpu")
    judge = build_scorer(build_config({**options, "judge_allow_plain_http": True}), device="cpu")
    assert judge.backend.allow_plain_http and judge.backend.timeout_s == 30.0
