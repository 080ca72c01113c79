"""Config presets: ``algo=`` sets defaults that differ from GRPO's, and the user's own keys win."""

from pathlib import Path

import yaml

from rlvr.config import ExperimentConfig, build_config, load_config


def test_defaults_are_grpo():
    cfg = ExperimentConfig()
    assert cfg.algorithm.algo == "grpo"
    assert cfg.algorithm.scale_rewards == "group"
    assert cfg.algorithm.aggregation == "token_mean"
    assert cfg.algorithm.beta == 0.0


def test_dr_grpo_preset_and_user_override_wins():
    cfg = build_config({"algo": "dr_grpo"})
    assert cfg.algorithm.scale_rewards == "none"
    assert cfg.algorithm.aggregation == "seq_mean_token_sum_norm"
    cfg = build_config({"algo": "dr_grpo", "scale_rewards": "group"})
    assert cfg.algorithm.scale_rewards == "group"


def test_dapo_preset():
    cfg = build_config({"algo": "dapo"})
    assert cfg.algorithm.epsilon_high == 0.28 and cfg.algorithm.dynamic_sampling


def test_tagrpo_algos_keep_their_rephrasings():
    for algo in ("tagrpo", "tagrpo_unanchored", "tagrpo_unpooled", "equal_sampling"):
        assert build_config({"algo": algo}).tagrpo.num_rephrasings == 4
        assert build_config({"algo": algo, "num_rephrasings": 1}).tagrpo.num_rephrasings == 1
    assert build_config({"num_rephrasings": 0}).tagrpo.enabled is False  # algo=grpo: off is the default


def test_committed_study_configs_still_build():
    # every arm of every study (and each resolved config.yaml of its runs) passes the checks
    experiments = Path(__file__).resolve().parents[2] / "experiments"
    studies = sorted(experiments.glob("*.yaml"))
    saved_configs = sorted((experiments / "results").rglob("config.yaml"))
    assert studies and saved_configs, f"no study configs under {experiments}"
    for study in studies:
        spec = yaml.safe_load(study.read_text())
        for arm in spec["arms"].values():
            build_config({**spec["common"], **arm})
    for saved in saved_configs:
        load_config(str(saved), [])
