"""The generation knobs (top_k, min_p, repetition_penalty), chat_template_kwargs and entropy_coef as options."""

import pytest
import yaml

from rlvr.config import load_config


@pytest.mark.parametrize(("pair", "fix"), [
    ("top_k=-1", "use 0 (off) or a positive number of tokens"),
    ("min_p=1.5", "use a value in [0, 1]"),
    ("min_p=-0.1", "use a value in [0, 1]"),
    ("repetition_penalty=0", "use a value > 0"),
    ("entropy_coef=-0.01", "use entropy_coef >= 0"),
    ("chat_template_kwargs=[1, 2]", "must be a mapping"),
    ("chat_template_kwargs=thinking", "must be a mapping"),
])
def test_bad_values_name_the_option_and_the_fix(pair, fix):
    with pytest.raises((ValueError, TypeError)) as info:
        load_config(None, [pair])
    assert pair.split("=")[0] in str(info.value) and fix in str(info.value)


def test_the_defaults_are_trls_and_off():
    cfg = load_config(None, [])
    assert (cfg.rollout.top_k, cfg.rollout.min_p, cfg.rollout.repetition_penalty) == (0, None, 1.0)
    assert cfg.data.chat_template_kwargs is None and cfg.algorithm.entropy_coef == 0.0


@pytest.mark.parametrize("raw", ["{enable_thinking: false}", '{"enable_thinking": false}'])
def test_chat_template_kwargs_from_the_command_line_is_a_mapping(raw):
    cfg = load_config(None, [f"chat_template_kwargs={raw}", "top_k=20", "min_p=0.05", "repetition_penalty=1.1"])
    assert cfg.data.chat_template_kwargs == {"enable_thinking": False}
    assert (cfg.rollout.top_k, cfg.rollout.min_p, cfg.rollout.repetition_penalty) == (20, 0.05, 1.1)


def test_chat_template_kwargs_from_yaml_round_trips(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"data": {"chat_template_kwargs": {"enable_thinking": False, "level": 2}}}))
    cfg = load_config(str(path), [])
    assert cfg.data.chat_template_kwargs == {"enable_thinking": False, "level": 2}
    again = tmp_path / "config.yaml"
    again.write_text(yaml.safe_dump(cfg.to_dict()))
    assert load_config(str(again), []) == cfg
