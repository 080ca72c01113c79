"""Options may name the env var that holds an API key, never hold the key (rlvr.rewards.api_keys)."""

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
