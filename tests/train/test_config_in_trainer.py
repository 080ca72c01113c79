"""Config options that only the trainer can show reaching their use (the pure config tests are in tests/config/)."""

import pytest

import rlvr.train.trainer as trainer_module
from rlvr.config import ExperimentConfig, build_config

from .conftest import tiny_overrides


def test_trust_remote_code_is_off_by_default_and_reaches_load_policy(tmp_path, monkeypatch):
    assert ExperimentConfig().model.trust_remote_code is False
    seen = []

    class Loaded(Exception):
        pass

    def spy(name, **kwargs):
        seen.append(kwargs["trust_remote_code"])
        pickles.append(kwargs["allow_pickle_weights"])
        raise Loaded  # stop before any model is built

    pickles = []

    monkeypatch.setattr(trainer_module, "load_policy", spy)
    for value, overrides in ((False, {}), (True, {"trust_remote_code": True})):
        cfg = build_config(tiny_overrides(tmp_path / str(value), data="rg:chain_sum:size=4", **overrides))
        with pytest.raises(Loaded):
            trainer_module.Trainer(cfg)
        assert seen[-1] is value
    assert pickles == [False, False]  # safetensors only unless allow_pickle_weights=true
    cfg = build_config(tiny_overrides(tmp_path / "pickle", data="rg:chain_sum:size=4", allow_pickle_weights=True))
    with pytest.raises(Loaded):
        trainer_module.Trainer(cfg)
    assert pickles[-1] is True
