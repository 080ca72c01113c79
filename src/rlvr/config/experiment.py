"""The experiment config: every section nested in one frozen :class:`ExperimentConfig`."""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from typing import Any

from rlvr.config.batch import BatchShape, batch_shape
from rlvr.config.dagrpo import DaGRPOConfig
from rlvr.config.evaluation import EvalConfig
from rlvr.config.fields import _check_finite, _fail, help_text
from rlvr.config.objective import ObjectiveConfig
from rlvr.config.origin import ConfigOrigin
from rlvr.config.presets import PRESETS
from rlvr.config.python_objects import PythonObjects
from rlvr.config.sections import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
)
from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.config.vllm import VLLMConfig

# algo presets that are TA-GRPO variants: they only mean something with num_rephrasings >= 1
TAGRPO_ALGOS = tuple(name for name, preset in PRESETS.items() if "num_rephrasings" in preset)

SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "rollout": RolloutConfig,
    "vllm": VLLMConfig,
    "reward": RewardConfig,
    "algorithm": AlgorithmConfig,
    "objective": ObjectiveConfig,
    "dagrpo": DaGRPOConfig,
    "tagrpo": TAGRPOConfig,
    "optim": OptimConfig,
    "eval": EvalConfig,
    "run": RunConfig,
}


@dataclass(frozen=True)
class ExperimentConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    dagrpo: DaGRPOConfig = field(default_factory=DaGRPOConfig)
    tagrpo: TAGRPOConfig = field(default_factory=TAGRPOConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    # reward callables and in-memory data from the Python API (the sections hold their labels); not
    # an option: not in config.yaml, --help or comparisons (rlvr.config.python_objects)
    python: PythonObjects = field(default_factory=PythonObjects, compare=False, repr=False)
    # which keys the user wrote and which TRL names made the config TRL's (rlvr.config.origin): for the
    # start-up line only, not an option
    origin: ConfigOrigin = field(default_factory=ConfigOrigin, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Checks that read options of two sections (one section's own checks live in the section)."""
        for name in SECTIONS:
            _check_finite(getattr(self, name))
        if not self.reward.reward_funcs and self.rollout.environment_factory is None:
            _fail("reward_funcs", self.reward.reward_funcs, "name at least one reward function, e.g. accuracy")
        self._check_batches()
        self._check_algorithm()
        self._check_rollout_modes()

    def _check_batches(self) -> None:
        self.batch_shape(configured_world_size(self.run.nproc))

    def batch_shape(self, world_size: int) -> BatchShape:
        """The step's prompts, micro-batches and optimiser steps on ``world_size`` processes (rlvr.config.batch)."""
        o = self.optim
        shape = batch_shape(prompts_per_step=self.rollout.prompts_per_step, num_generations=self.rollout.num_generations,
                            variants=self.tagrpo.responses_per_prompt_factor,
                            per_device_train_batch_size=o.per_device_train_batch_size,
                            gradient_accumulation_steps=o.gradient_accumulation_steps,
                            steps_per_generation=self.algorithm.steps_per_generation, world_size=world_size)
        pools = shape.prompts_per_step // world_size
        if shape.optimizer_steps_per_pass > pools:
            _fail("steps_per_generation", self.algorithm.steps_per_generation,
                  f"{shape.optimizer_steps_per_pass} optimiser steps per pass, but each holds whole prompts and a "
                  f"process has {pools} per step: use at most {pools} optimiser steps (steps_per_generation / "
                  "gradient_accumulation_steps), or more prompts per step")
        return shape

    def _check_algorithm(self) -> None:
        a, d = self.algorithm, self.dagrpo
        if (d.pair_masking or d.anchors != "off") and a.advantage_estimator not in ("grpo", "dagrpo"):
            _fail("advantage_estimator", a.advantage_estimator,
                  "DaGRPO's pair masking and anchors define their own (pairwise) advantage; use grpo")
        if a.algo == "sft" and d.anchors == "off":
            _fail("anchors", d.anchors, "SFT trains on the anchors (the data's solutions): drop anchors=off "
                  "(algo=sft sets anchors=always), or use `rlvr train` for RL")
        if a.algo in TAGRPO_ALGOS and self.tagrpo.num_rephrasings == 0:
            _fail("num_rephrasings", 0, f"algo={a.algo} with no rephrasings would be plain GRPO: set "
                  "num_rephrasings >= 1 (the preset's 4), or use algo=grpo for GRPO")
        self._check_objective()

    def _check_objective(self) -> None:
        """What the objective's controls need of other sections (TRL refuses the same)."""
        a, o = self.algorithm, self.objective
        if a.multi_objective_aggregation == "normalize_then_sum" and (self.dagrpo.enabled or a.advantage_estimator != "grpo"):
            _fail("multi_objective_aggregation", a.multi_objective_aggregation, "normalize_then_sum (GDPO) is its own "
                  "advantage: it replaces advantage_estimator and DaGRPO's pairwise form; use advantage_estimator=grpo "
                  "without pair masking or anchors")
        if o.sync_ref_model and a.beta == 0:
            _fail("sync_ref_model", True, "with beta = 0 there is no reference model to synchronise: set beta > 0 "
                  "(e.g. 0.04) or sync_ref_model=false")
        if o.sync_ref_model and self.model.lora_r > 0:
            _fail("sync_ref_model", True, "with LoRA the reference is the policy with its adapters off, not a model "
                  "of its own to move (TRL refuses it too): use full fine-tuning or sync_ref_model=false")

    def _check_rollout_modes(self) -> None:
        """(What the engine can do is its class's abilities: the plan checks them, train/plan.py's engine_plan.)"""
        r, v = self.rollout, self.vllm
        if r.async_generation and self.algorithm.dynamic_sampling:
            _fail("async_generation", True, "dynamic sampling decides after rewarding whether to draw another round, so "
                  "its rounds cannot be generated ahead; turn one of the two off")
        if r.async_generation and v.vllm_enable_sleep_mode:
            _fail("vllm_enable_sleep_mode", True, "with async_generation vLLM generates during the update, so it cannot "
                  "sleep then; turn one of the two off")
        if r.environment_factory is not None:
            self._check_environments()

    def _check_environments(self) -> None:
        """What environment_factory cannot be combined with (rlvr.rollout.environments)."""
        r, t, d, e = self.rollout, self.tagrpo, self.dagrpo, self.eval
        refused = [  # (option, its value, it clashes, why)
            ("async_generation", r.async_generation, r.async_generation,
             ("an environment's state after a rollout is read by get_reward and the reward functions; sampled ahead, "
              "it would be another step's")),
            ("num_rephrasings", t.num_rephrasings, t.num_rephrasings > 0,
             ("TA-GRPO rephrases the dataset's question, but each environment rollout starts from its own reset(); "
              "use algo=grpo")),
            ("anchors", d.anchors, d.anchors != "off",
             ("an anchor is an expert answer to the row's prompt, which cannot have played the environment; use "
              "anchors=off (pair masking works)")),
            ("eval_data", e.eval_data, e.enabled,
             "rlvr's pass@k evaluation has no environment to reset; drop eval_data (evaluate with your own loop)"),
        ]
        for option, value, clash, reason in refused:
            if clash:
                _fail(option, value, f"with environment_factory: {reason}")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def flat(self) -> dict[str, Any]:
        return {k: v for section in self.to_dict().values() for k, v in section.items()}


def configured_world_size(nproc: int) -> int:
    """The processes a run will have: torchrun's WORLD_SIZE in a launched process, else ``nproc``."""
    return int(os.environ.get("WORLD_SIZE") or 0) or nproc


FIELD_SECTION: dict[str, str] = {
    f.name: section for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
}
assert len(FIELD_SECTION) == sum(len(dataclasses.fields(c)) for c in SECTIONS.values()), "duplicate field"


def field_help() -> list[tuple[str, str, Any, str]]:
    """(section, name, default, help) for every option, for --help."""
    rows = []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            rows.append((section, f.name, default, help_text(f)))
    return rows


def unknown_key_error(key: str) -> ValueError:
    close = difflib.get_close_matches(key, list(FIELD_SECTION), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ValueError(f"unknown option {key!r}{hint} (`rlvr train --help` lists every option)")
