"""rlvr.GRPOConfig has the installed TRL's GRPOConfig fields, in its order, with its defaults; what it asks of rlvr."""

from __future__ import annotations

import dataclasses

import pytest

from rlvr import GRPOConfig
from rlvr.trl_api.config import config_overrides

trl = pytest.importorskip("trl", reason="TRL is in the dev extra (make setup installs it)")


def _defaults(cls) -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)}


def test_every_field_and_default_is_trls():
    ours, theirs = _defaults(GRPOConfig), _defaults(trl.GRPOConfig)
    assert list(ours) == list(theirs), "regenerate src/rlvr/trl_api/fields.py (its docstring says how)"
    different = {k: (ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k] or type(ours[k]) is not type(theirs[k])}
    assert not different


def test_instances_do_not_share_mutable_defaults_and_to_dict_has_every_field():
    a, b = GRPOConfig(), GRPOConfig()
    a.include_for_metrics.append("loss")  # TRL's one list default
    assert b.include_for_metrics == []
    assert set(a.to_dict()) == {f.name for f in dataclasses.fields(trl.GRPOConfig)}


def test_only_what_differs_from_trls_defaults_is_asked():
    args = GRPOConfig(output_dir="out", learning_rate=3e-6, num_generations=4, beta=0.0)
    assert config_overrides(args) == {"output_dir": "out", "learning_rate": 3e-6, "num_generations": 4}
    assert config_overrides(None) == {}
    with pytest.raises(TypeError, match="rlvr.GRPOConfig or a trl.GRPOConfig"):
        config_overrides({"learning_rate": 1e-6})


def test_an_unknown_keyword_is_a_type_error_as_in_trl():
    with pytest.raises(TypeError, match="learning_rat"):
        GRPOConfig(learning_rat=1e-6)


def test_a_trl_config_object_is_read_through_its_to_dict():
    args = trl.GRPOConfig(output_dir="out", use_cpu=True, learning_rate=2e-6, max_steps=3)
    asked = config_overrides(args)
    assert asked["learning_rate"] == 2e-6 and asked["max_steps"] == 3 and asked["output_dir"] == "out"
    assert "beta" not in asked  # TRL's default
