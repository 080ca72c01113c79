"""Experiment configuration: frozen dataclasses per area, nested in one :class:`ExperimentConfig`.

Every field name is unique across sections, so the command line takes flat ``key=value`` pairs
(``beta=0.04``) and YAML files may be flat or nested by section. Defaults live only here. Names
follow TRL's ``GRPOConfig`` where one exists; the verl alias is given in each help text.

Resolution order (later wins): field defaults ← ``algo`` preset ← YAML file ← command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import yaml

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, SCALE_REWARDS
from rlvr.core.losses import IMPORTANCE_LEVELS, resolve_aggregation
from rlvr.data.prompts import DEFAULT_INSTRUCTION
from rlvr.rollout import ROLLOUT_ENGINES

DEFAULT_DATA = "rg:chain_sum:size=1000:seed=0:min_terms=2:max_terms=2:min_digits=1:max_digits=1"


def _f(default: Any, help: str) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _fail(name: str, value: Any, fix: str) -> None:
    raise ValueError(f"{name}={value!r}: {fix}")


@dataclass(frozen=True)
class ModelConfig:
    model: str = _f("smollm2-135m", "policy: alias (smollm2-135m, tiny-random), local path or Hub id")
    dtype: str = _f("float32", "parameter dtype: float32 | bfloat16")
    device: str = _f("auto", "auto (cuda if available, else cpu) | cpu | cuda | cuda:N")
    trust_remote_code: bool = _f(False, "allow model code from the Hub (off: safetensors + built-in code only)")
    lora_r: int = _f(0, "LoRA rank; 0 trains all parameters")
    lora_alpha: int = _f(16, "LoRA alpha")
    lora_dropout: float = _f(0.0, "LoRA dropout")
    lora_target_modules: str = _f("all-linear", "PEFT target_modules (comma list or all-linear)")

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "fp32", "bf16"):
            _fail("dtype", self.dtype, "use float32 or bfloat16")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            _fail("device", self.device, "use auto, cpu, cuda or cuda:N")
        if self.lora_r < 0:
            _fail("lora_r", self.lora_r, "use 0 (full fine-tuning) or a positive rank such as 16")
        if not 0.0 <= self.lora_dropout < 1.0:
            _fail("lora_dropout", self.lora_dropout, "use a value in [0, 1)")


@dataclass(frozen=True)
class DataConfig:
    data: str = _f(DEFAULT_DATA, "training data: rg:NAME[:k=v...], gsm8k-100, FILE.jsonl|.json|.parquet, or a Hub dataset id")
    system_prompt: str | None = _f(None, "system message prepended to every prompt (none by default)")
    instruction: str | None = _f(DEFAULT_INSTRUCTION, "text appended to each question (null: none)")
    shuffle: bool = _f(True, "shuffle prompts each epoch (seeded)")


@dataclass(frozen=True)
class RolloutConfig:
    prompts_per_step: int = _f(4, "B: prompts per training step (TRL: generation_batch_size / num_generations; verl: data.train_batch_size)")
    num_generations: int = _f(8, "G: responses per prompt (verl: rollout.n)")
    max_completion_length: int = _f(40, "max new tokens per response (verl: data.max_response_length)")
    temperature: float = _f(1.0, "sampling temperature; log-probs are computed at the same temperature")
    top_p: float = _f(1.0, "nucleus sampling p")
    rollout_engine: str = _f("hf", "generation engine: hf (transformers generate)")

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1:
            _fail("prompts_per_step", self.prompts_per_step, "need at least 1 prompt per step")
        if self.num_generations < 2:
            _fail("num_generations", self.num_generations, "group-relative advantages need G >= 2")
        if self.max_completion_length < 1:
            _fail("max_completion_length", self.max_completion_length, "use a positive token count")
        if self.temperature <= 0:
            _fail("temperature", self.temperature, "training samples need temperature > 0")
        if not 0 < self.top_p <= 1:
            _fail("top_p", self.top_p, "use a value in (0, 1]")
        if self.rollout_engine not in ROLLOUT_ENGINES:
            _fail("rollout_engine", self.rollout_engine, f"choose one of {sorted(ROLLOUT_ENGINES)}")


@dataclass(frozen=True)
class RewardConfig:
    reward_funcs: list[str] = _f(["accuracy"], "reward functions: accuracy, format, module:function or file.py:function")
    reward_weights: list[float] | None = _f(None, "one weight per reward function (default all 1)")
    verifier_workers: int = _f(2, "math-verify worker processes")
    verifier_timeout: float = _f(5.0, "seconds per verification; a timeout scores 0 and is counted")
    answer_extraction: str = _f("flexible", "boxed: last \\boxed{}, '#### N' or 'the answer is'; flexible: also the last number")

    def __post_init__(self) -> None:
        if not self.reward_funcs:
            _fail("reward_funcs", self.reward_funcs, "name at least one reward function, e.g. accuracy")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            _fail("reward_weights", self.reward_weights,
                  f"give one weight per reward function ({len(self.reward_funcs)}: {self.reward_funcs})")
        if self.answer_extraction not in ("boxed", "flexible"):
            _fail("answer_extraction", self.answer_extraction, "choose boxed or flexible")
        if self.verifier_workers < 1:
            _fail("verifier_workers", self.verifier_workers, "use at least 1 worker process")
        if self.verifier_timeout <= 0:
            _fail("verifier_timeout", self.verifier_timeout, "use a positive number of seconds")


@dataclass(frozen=True)
class AlgorithmConfig:
    algo: str = _f("grpo", "preset: grpo, dr_grpo, dapo, rloo, gspo (sets the defaults below)")
    advantage_estimator: str = _f("grpo", "grpo | rloo (verl: algorithm.adv_estimator)")
    scale_rewards: str = _f("group", "group | batch | none (verl: norm_adv_by_std_in_grpo)")
    advantage_eps: float = _f(1e-6, "epsilon added to the std (verl 1e-6; TRL 1e-4)")
    loss_type: str = _f("token_mean", "token_mean | seq_mean_token_mean | seq_mean_token_sum_norm, or TRL dapo/grpo/dr_grpo (verl: loss_agg_mode)")
    epsilon: float = _f(0.2, "lower clip range (verl: clip_ratio_low)")
    epsilon_high: float | None = _f(None, "upper clip range, default = epsilon (verl: clip_ratio_high; DAPO 0.28)")
    dual_clip: float | None = _f(None, "dual-clip constant c for A<0 (verl: clip_ratio_c = 3.0); null disables")
    importance_sampling_level: str = _f("token", "token | sequence (GSPO)")
    beta: float = _f(0.0, "KL coefficient (k3 estimator); 0 loads no reference model (verl: kl_loss_coef)")
    num_iterations: int = _f(1, "mu: passes over each rollout batch (verl: ppo_epochs)")
    steps_per_generation: int = _f(1, "optimiser steps per rollout batch per pass (mini-batches; groups never split)")
    mask_truncated_completions: bool = _f(False, "exclude responses that hit max_completion_length from the loss")
    dynamic_sampling: bool = _f(False, "DAPO: drop uniform-reward groups and refill from new prompts")
    max_num_gen_batches: int = _f(4, "dynamic sampling: at most this many generation rounds per step (verl name)")

    def __post_init__(self) -> None:
        if self.algo not in PRESETS:
            _fail("algo", self.algo, f"choose one of {sorted(PRESETS)}")
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            _fail("advantage_estimator", self.advantage_estimator, f"choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
        if self.scale_rewards not in SCALE_REWARDS:
            _fail("scale_rewards", self.scale_rewards, f"choose one of {SCALE_REWARDS}")
        resolve_aggregation(self.loss_type)
        if self.importance_sampling_level not in IMPORTANCE_LEVELS:
            _fail("importance_sampling_level", self.importance_sampling_level, f"choose one of {IMPORTANCE_LEVELS}")
        if not 0 <= self.epsilon < 1 or (self.epsilon_high is not None and self.epsilon_high < 0):
            _fail("epsilon", (self.epsilon, self.epsilon_high), "clip ranges must be >= 0 (epsilon < 1)")
        if self.dual_clip is not None and self.dual_clip <= 1:
            _fail("dual_clip", self.dual_clip, "use a constant > 1 (verl default 3.0) or null")
        if self.beta < 0:
            _fail("beta", self.beta, "use beta >= 0")
        if self.num_iterations < 1 or self.steps_per_generation < 1 or self.max_num_gen_batches < 1:
            _fail("num_iterations/steps_per_generation/max_num_gen_batches",
                  (self.num_iterations, self.steps_per_generation, self.max_num_gen_batches), "each must be >= 1")

    @property
    def aggregation(self) -> str:
        return resolve_aggregation(self.loss_type)

    @property
    def needs_old_logprobs(self) -> bool:
        """Old log-probs differ from the detached current ones only after the first update."""
        return self.num_iterations > 1 or self.steps_per_generation > 1


@dataclass(frozen=True)
class OptimConfig:
    learning_rate: float = _f(3e-5, "AdamW learning rate (verl: actor.optim.lr)")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    adam_beta1: float = _f(0.9, "AdamW beta1")
    adam_beta2: float = _f(0.99, "AdamW beta2")
    max_grad_norm: float = _f(1.0, "clip the global gradient norm (logged pre-clip); 0 disables")
    lr_scheduler_type: str = _f("constant_with_warmup", "transformers scheduler name: constant_with_warmup, linear, cosine, ...")
    warmup_ratio: float = _f(0.0, "fraction of optimiser steps spent warming up")
    per_device_train_batch_size: int | None = _f(None, "responses per forward/backward micro-batch (default: the whole mini-batch)")
    gradient_accumulation_steps: int | None = _f(None, "micro-batches per optimiser step (default: derived)")

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            _fail("learning_rate", self.learning_rate, "use a positive learning rate such as 1e-6")
        if not 0 <= self.warmup_ratio < 1:
            _fail("warmup_ratio", self.warmup_ratio, "use a fraction in [0, 1)")
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                _fail(name, value, "use a positive integer or null")


@dataclass(frozen=True)
class RunConfig:
    output_dir: str | None = _f(None, "run directory (default runs/<algo>-<time>)")
    max_steps: int = _f(16, "training steps (one rollout batch each)")
    seed: int = _f(0, "seed for data order, sampling and initialisation")
    save_steps: int = _f(0, "checkpoint every K steps (0: only at the end)")
    save_total_limit: int | None = _f(2, "keep the newest K checkpoints (null: all)")
    resume: bool = _f(False, "continue from the newest checkpoint in output_dir")
    log_completions: bool = _f(True, "write samples.jsonl")
    num_completions_to_log: int = _f(8, "responses written to samples.jsonl per step")
    progress_bar: bool = _f(True, "show a progress bar")

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            _fail("max_steps", self.max_steps, "train for at least 1 step")
        if self.save_steps < 0:
            _fail("save_steps", self.save_steps, "use 0 (save at the end) or a positive interval")
        if self.save_total_limit is not None and self.save_total_limit < 1:
            _fail("save_total_limit", self.save_total_limit, "keep at least 1 checkpoint, or null for all")


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "rollout": RolloutConfig,
    "reward": RewardConfig,
    "algorithm": AlgorithmConfig,
    "optim": OptimConfig,
    "run": RunConfig,
}

# algo presets: defaults that differ from GRPO's. The user's own keys always win.
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "dr_grpo": {"scale_rewards": "none", "loss_type": "dr_grpo"},
    "dapo": {"epsilon_high": 0.28, "loss_type": "token_mean", "dynamic_sampling": True, "beta": 0.0},
    "rloo": {"advantage_estimator": "rloo", "scale_rewards": "none"},
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
             "loss_type": "seq_mean_token_mean"},
}


@dataclass(frozen=True)
class ExperimentConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        o, a = self.optim, self.algorithm
        responses = self.rollout.prompts_per_step * self.rollout.num_generations
        if a.steps_per_generation > self.rollout.prompts_per_step:
            _fail("steps_per_generation", a.steps_per_generation,
                  f"mini-batches hold whole groups: use at most prompts_per_step={self.rollout.prompts_per_step}")
        if o.per_device_train_batch_size is not None and o.gradient_accumulation_steps is not None:
            per_step = o.per_device_train_batch_size * o.gradient_accumulation_steps
            mini = responses // a.steps_per_generation
            if per_step != mini:
                _fail("gradient_accumulation_steps", o.gradient_accumulation_steps,
                      f"per_device_train_batch_size x gradient_accumulation_steps = {per_step}, but each "
                      f"optimiser step sees {mini} responses (prompts_per_step x num_generations / "
                      "steps_per_generation); set only one of the two")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def flat(self) -> dict[str, Any]:
        return {k: v for section in self.to_dict().values() for k, v in section.items()}

    def replace(self, **overrides: Any) -> ExperimentConfig:
        return build_config({**self.flat(), **overrides}, apply_preset=False)


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
            rows.append((section, f.name, default, f.metadata.get("help", "")))
    return rows


def unknown_key_error(key: str) -> ValueError:
    close = difflib.get_close_matches(key, list(FIELD_SECTION), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ValueError(f"unknown option {key!r}{hint} (`rlvr train --help` lists every option)")


def flatten_yaml(doc: Any, source: str) -> dict[str, Any]:
    """Accept a YAML mapping that is flat or nested by section; return flat keys."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: the config file must be a mapping of option: value")
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if key in SECTIONS and isinstance(value, dict):
            flat.update(value)
        else:
            flat[key] = value
    return flat


def parse_cli_value(key: str, raw: str) -> Any:
    """Parse a command-line string for ``key`` into the field's type."""
    if key not in FIELD_SECTION:
        raise unknown_key_error(key)
    hint = _field_type(key)
    if hint is str:
        return raw
    value = yaml.safe_load(raw) if raw != "" else None
    if _is_list(hint) and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return value


def build_config(overrides: dict[str, Any], *, apply_preset: bool = True) -> ExperimentConfig:
    """Build a validated config from flat overrides (preset applied under the overrides)."""
    for key in overrides:
        if key not in FIELD_SECTION:
            raise unknown_key_error(key)
    algo = overrides.get("algo", AlgorithmConfig.algo)
    if algo not in PRESETS:
        _fail("algo", algo, f"choose one of {sorted(PRESETS)}")
    merged = {**(PRESETS[algo] if apply_preset else {}), **overrides}
    per_section: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in merged.items():
        per_section[FIELD_SECTION[key]][key] = _coerce(key, value)
    return ExperimentConfig(**{name: SECTIONS[name](**kw) for name, kw in per_section.items()})


def _field_type(key: str) -> Any:
    cls = SECTIONS[FIELD_SECTION[key]]
    return typing.get_type_hints(cls)[key]


def _is_list(hint: Any) -> bool:
    args = [a for a in typing.get_args(hint) if a is not type(None)] if _is_optional(hint) else [hint]
    return any(typing.get_origin(a) is list for a in args)


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _coerce(key: str, value: Any) -> Any:
    """Check ``value`` against the field's type; convert lossless cases (int → float, str → list)."""
    hint = _field_type(key)
    if value is None:
        if _is_optional(hint):
            return None
        raise ValueError(f"{key} cannot be null; give a value (see `rlvr train --help`)")
    base = [a for a in typing.get_args(hint) if a is not type(None)][0] if _is_optional(hint) else hint
    origin = typing.get_origin(base)
    if origin is list:
        (item,) = typing.get_args(base)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{key} must be a list (YAML list or comma-separated), got {value!r}")
        return [_coerce_scalar(key, item, v) for v in value]
    return _coerce_scalar(key, base, value)


def _coerce_scalar(key: str, kind: type, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"{key} must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError(f"{key} must be an integer, got {value!r}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 3e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise TypeError(f"{key} must be a number, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise TypeError(f"{key} must be a string, got {value!r}")
    raise AssertionError(f"unsupported field type {kind} for {key}")


def load_config(config_file: str | None, cli_pairs: list[str]) -> ExperimentConfig:
    """Resolve the experiment config from an optional YAML file and ``key=value`` pairs."""
    overrides: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                overrides.update(flatten_yaml(yaml.safe_load(fh), config_file))
        except FileNotFoundError:
            raise ValueError(f"config file {config_file!r} does not exist") from None
    for pair in cli_pairs:
        if "=" not in pair:
            raise ValueError(f"expected key=value, got {pair!r} (e.g. max_steps=10)")
        key, raw = pair.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        overrides[key] = parse_cli_value(key, raw)
    return build_config(overrides)
