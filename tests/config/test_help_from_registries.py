"""``rlvr train --help`` and the refusals list the registered names from the registries: a name registered now (as a
contributor's checklist step would) is in both, with no edit to a help text or a message."""

from __future__ import annotations

import pytest

from rlvr.cli import main
from rlvr.config import build_config
from rlvr.config.presets import PRESETS
from rlvr.core import names
from rlvr.rewards import format_reward, resolve_reward
from rlvr.rewards.registry import BUILTIN_REWARDS
from rlvr.rollout import ROLLOUT_ENGINES, engine_class


def train_help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.fixture
def registered_in_place():
    """``add(names_set_or_list, name)``: register ``name`` as the decorators do (in place), undone after the test."""
    added = []

    def add(registry, name: str) -> None:
        registry.add(name) if isinstance(registry, set) else registry.append(name)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.remove(name)


def test_a_registered_engine_is_in_the_help_and_the_refusals(monkeypatch, capsys):
    monkeypatch.setitem(ROLLOUT_ENGINES, "toy_engine", ROLLOUT_ENGINES["hf"])
    text = train_help(capsys)
    assert "toy_engine" in text[text.index("    rollout_engine = "):].split("\n")[1]
    with pytest.raises(ValueError, match=r"rollout_engine='nope': choose one of \[.*'toy_engine'"):
        build_config({"rollout_engine": "nope"})
    with pytest.raises(ValueError, match=r"unknown rollout_engine 'nope': choose one of \[.*'toy_engine'"):
        engine_class("nope")
    assert build_config({"rollout_engine": "toy_engine"}).rollout.rollout_engine == "toy_engine"


@pytest.mark.parametrize("option, registry", [
    ("advantage_estimator", names.ADVANTAGE_ESTIMATOR_NAMES),
    ("policy_loss", names.POLICY_LOSS_NAMES),
    ("loss_type", names.AGGREGATION_MODES),
])
def test_a_registered_estimator_loss_or_aggregation_is_in_the_help_and_the_refusals(option, registry, capsys,
                                                                                    registered_in_place):
    registered_in_place(registry, f"toy_{option}")
    text = train_help(capsys)
    help_of_option = text[text.index(f"    {option} = "):].split("\n")[1]
    assert f"toy_{option}" in help_of_option
    with pytest.raises(ValueError, match=rf"{option}.*'nope'.*toy_{option}"):
        build_config({option: "nope"})
    if option != "loss_type":  # (an aggregation needs its function in rlvr.core.losses to be run)
        assert getattr(build_config({option: f"toy_{option}"}).algorithm, option) == f"toy_{option}"


def test_a_registered_preset_is_in_the_help_and_the_refusal(monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "toy_algo", {})
    assert "toy_algo" in train_help(capsys)
    with pytest.raises(ValueError, match=r"algo='nope': choose one of \[.*'toy_algo'"):
        build_config({"algo": "nope"})


def test_a_registered_reward_is_in_the_help_and_the_refusal(monkeypatch, capsys):
    monkeypatch.setitem(BUILTIN_REWARDS, "toy_reward", lambda pool, answer_extraction: format_reward)
    text = train_help(capsys)
    assert "format, toy_reward (rlvr's" in text and "rlvr:format, rlvr:toy_reward rlvr's" in text
    for dialect, listed in (("rlvr", "toy_reward"), ("trl", "rlvr:toy_reward")):
        with pytest.raises(ValueError, match=rf"unknown reward 'nope'; valid names \({dialect}\): .*{listed}"):
            resolve_reward("nope", names=dialect)
    assert resolve_reward("toy_reward") is resolve_reward("rlvr:toy_reward", names="trl") is format_reward


def test_under_preset_trl_a_bare_rlvr_only_builtin_says_to_write_its_rlvr_name(monkeypatch):
    """open-r1 has an ``accuracy`` and a ``format``, which a bare name means under preset=trl; a built-in only rlvr
    has is refused there, with the name that works."""
    monkeypatch.setitem(BUILTIN_REWARDS, "toy_reward", lambda pool, answer_extraction: format_reward)
    with pytest.raises(ValueError, match=r"^reward 'toy_reward' is an rlvr built-in, not an open-r1 reward; under "
                                         r"preset=trl a bare name means open-r1's or TRL's: write rlvr:toy_reward$"):
        resolve_reward("toy_reward", names="trl")


def test_a_registered_data_source_is_in_the_help(monkeypatch, capsys):
    """data='s help is the sources' registry's spec forms (rlvr.data.source_registry), in the order of tries."""
    import rlvr.data.sources  # noqa: F401  (registers the built-ins)
    from rlvr.data.source_registry import SOURCES, Source, spec_forms

    monkeypatch.setitem(SOURCES, "toy-cubes", Source("toy-cubes", lambda spec, **rules: [], "'toy-cubes'", "toy"))
    text = train_help(capsys)
    help_of_data = text[text.index("    data = "):].split("\n")[1]
    assert spec_forms() in help_of_data and "'toy-cubes'" in help_of_data
