"""Config options that only the trainer can show reaching their use (the pure config tests are in tests/config/)."""

import pytest

import rlvr.train.setup as train_setup
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

    monkeypatch.setattr(train_setup, "load_policy", spy)
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


def test_trainer_runs_what_algo_says_sft_included(tmp_path):
    """Trainer(cfg) is the one entry point: with algo=sft it trains supervised (no rollouts, no rewards)."""
    from rlvr.train.sft import sft_training_step

    cfg = build_config(tiny_overrides(tmp_path / "sft", algo="sft", data="rg:chain_sum:size=8", max_steps=1))
    trainer = trainer_module.Trainer(cfg)
    assert trainer.plan.mode == "sft" and trainer.training_step.__func__ is sft_training_step
    (metrics,) = trainer.train()
    assert "sft/anchor_rate" in metrics and "rollout/reward_mean" not in metrics
    rl = build_config(tiny_overrides(tmp_path / "rl", data="rg:chain_sum:size=8", max_steps=1))
    assert type(trainer_module.Trainer(rl)) is trainer_module.Trainer
