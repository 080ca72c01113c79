"""Experiment configuration: frozen dataclasses per area, nested in one :class:`ExperimentConfig`.

Every field name is unique across sections, so the command line takes flat ``key=value`` pairs
(``beta=0.04``) and YAML files may be flat or nested by section. Defaults live only here. Names
follow TRL's ``GRPOConfig`` where one exists; the verl alias is given in each help text.

Resolution order (later wins): field defaults ← ``algo`` preset ← YAML file ← command line.
Every number option must be finite (nan and inf are refused); a single value for a list option
(``reward_weights=1``) is a one-element list.
"""

from rlvr.config.evaluation import EvalConfig
from rlvr.config.experiment import FIELD_SECTION, SECTIONS, ExperimentConfig, field_help, unknown_key_error
from rlvr.config.parsing import build_config, flatten_yaml, load_config, parse_cli_value
from rlvr.config.presets import PRESETS
from rlvr.config.sections import (
    DEFAULT_DATA,
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
)

__all__ = [
    "DEFAULT_DATA",
    "FIELD_SECTION",
    "PRESETS",
    "SECTIONS",
    "AlgorithmConfig",
    "DataConfig",
    "EvalConfig",
    "ExperimentConfig",
    "ModelConfig",
    "OptimConfig",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "build_config",
    "field_help",
    "flatten_yaml",
    "load_config",
    "parse_cli_value",
    "unknown_key_error",
]
