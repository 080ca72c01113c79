"""``rlvr.GRPOTrainer``: TRL's ``GRPOTrainer`` constructor and the methods a script uses, on rlvr's trainer.

    from rlvr import GRPOConfig, GRPOTrainer      # was: from trl import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(model="Qwen/Qwen2-0.5B-Instruct", reward_funcs=accuracy_reward,
                          args=GRPOConfig(output_dir="out", learning_rate=1e-6), train_dataset=dataset)
    trainer.train()

The arguments become one rlvr config with ``preset: trl`` (TRL's defaults and semantics): ``args`` gives
its keys that differ from TRL's defaults (an ``rlvr.GRPOConfig`` or a ``trl.GRPOConfig``: what rlvr does
with each key is docs/from_trl.md's table); ``model`` is a name, a folder or a loaded model (then
``processing_class`` or the model's own folder gives the tokenizer); ``reward_funcs`` callables and names;
``train_dataset`` a ``datasets.Dataset``, an ``IterableDataset`` (with ``max_steps``, as TRL requires: the rows the
run consumes are read from it) or a list of row dicts;
``peft_config`` a peft ``LoraConfig`` (its r, alpha, dropout and target modules); ``callbacks``
transformers ``TrainerCallback`` objects, called on train begin/end, step end, log, save and evaluate.
rlvr's :class:`~rlvr.train.trainer.Trainer` is built at the first ``train()`` (or ``model`` access), so
``train(resume_from_checkpoint=True)`` on an output_dir with checkpoints resumes as TRL's does.

``evaluate()`` samples ``eval_dataset``'s prompts (G each), scores them with the run's reward functions and
returns TRL's rollout metrics prefixed ``eval_`` (``eval_reward``, ``eval_rewards/<name>/mean``,
``eval_completions/mean_length``, ...); TRL's ``eval_loss`` is not computed. With ``eval_strategy: steps``
it runs every ``eval_steps`` optimiser steps during training. Arguments TRL takes that rlvr has no
counterpart for (a reward model, custom optimisers, a rollout function, quantisation) are refused
with the reason. ``tools=[fn, ...]`` and ``environment_factory`` are TRL's: the chat template lists the tools (an
environment's methods), the model's calls run in this process and their results are masked out of the loss
(docs/training.md, "Tools" and "Environments").
"""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

from rlvr.trl_api.config import GRPOConfig, config_overrides

logger = logging.getLogger(__name__)

# TRL's evaluation keys: this class runs TRL-style evaluation on eval_dataset itself (rlvr's own eval_data
# evaluation is pass@k with the verifier)
EVAL_KEYS = ("eval_strategy", "eval_steps", "do_eval", "eval_on_start", "per_device_eval_batch_size")
_REFUSED = {
    "reward_processing_classes": "rlvr has no reward models; give reward functions",
    "quantization_config": "rlvr does not load quantised models (dtype=bfloat16 halves the memory)",
    "rollout_func": "rlvr samples with its own engines (rollout_engine)",
}


class GRPOTrainer:
    """TRL 1.16's ``GRPOTrainer`` arguments, trained by rlvr (module docstring)."""

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None, optimizers=(None, None),
                 quantization_config=None, peft_config=None, tools=None, rollout_func=None,
                 environment_factory=None):
        given = {"reward_processing_classes": reward_processing_classes, "quantization_config": quantization_config,
                 "rollout_func": rollout_func}
        for name, value in given.items():
            if value is not None:
                raise ValueError(f"GRPOTrainer({name}=...): not supported by rlvr: {_REFUSED[name]}")
        if optimizers not in ((None, None), None, [None, None]):
            raise ValueError("GRPOTrainer(optimizers=...): rlvr builds the optimiser and schedule from args (optim, "
                             "learning_rate, lr_scheduler_type, ...); a custom optimiser is not supported")
        if (reward_funcs is None or (isinstance(reward_funcs, (list, tuple)) and not reward_funcs)) \
                and environment_factory is None:
            raise ValueError("GRPOTrainer needs reward_funcs: a function, a name (e.g. 'accuracy') or a list of them")
        if train_dataset is None and environment_factory is None:
            raise ValueError("GRPOTrainer needs train_dataset (a datasets.Dataset or a list of row dicts)")
        if args is None:  # TRL: GRPOConfig(f"{model_name}-GRPO")
            name = model if isinstance(model, str) else getattr(model, "name_or_path", "model") or "model"
            args = GRPOConfig(output_dir=f"{str(name).split('/')[-1]}-GRPO")
        self.args = args
        overrides = config_overrides(args)
        self._eval = {key: overrides.pop(key) for key in EVAL_KEYS if key in overrides}
        self.eval_dataset = eval_dataset
        overrides.update(preset="trl", model=model, reward_funcs=reward_funcs or [])
        if tools:  # TRL's tools=[fn, ...]: listed by the chat template, called in this process (docs/training.md)
            overrides["tools"] = list(tools)
        if environment_factory is not None:  # TRL's: an instance per rollout, its methods as tools (docs/training.md)
            overrides["environment_factory"] = environment_factory
        overrides["data"] = (_train_rows(train_dataset, overrides) if train_dataset is not None
                             else _environment_rows(overrides))
        if processing_class is not None:
            overrides["processing_class"] = processing_class
        if peft_config is not None:
            overrides.update(lora_options(peft_config))
        from rlvr.config import build_config

        self._overrides = overrides
        self.cfg = build_config(overrides)  # a bad key or value fails here, as TRL's would at construction
        self.callbacks = list(callbacks or [])
        self._trainer = None
        self._resumed_with = None
        self.state = None  # a transformers TrainerState once training ran (global_step, log_history)
        show_rlvr_logs()

    # ------------------------------------------------------------------ what a script reads
    @property
    def model(self):
        return self._built().policy

    @property
    def processing_class(self):
        return self._built().tokenizer

    @property
    def train_dataset(self):
        return self.cfg.python.data

    def _built(self, resume=None):
        """rlvr's Trainer, built once (again when ``train`` is asked to resume and it was built without)."""
        from rlvr.config import build_config
        from rlvr.train.trainer import Trainer

        if self._trainer is not None and (resume is None or resume == self._resumed_with):
            return self._trainer
        if self._trainer is not None:
            self._trainer.close()
        cfg = self.cfg
        if resume is not None:
            extra = {"resume": True} if resume is True else {"resume_from_checkpoint": str(resume)}
            cfg = build_config({**self._overrides, **extra})
        self._trainer = Trainer(cfg, callbacks=self.callbacks)
        if self.eval_dataset is not None and self._eval.get("eval_strategy", "no") == "steps":
            # (rlvr's own eval_data evaluation is off here: a GRPOConfig has no such key, and EVAL_KEYS are TRL's)
            self._trainer.evaluation = _DuringTraining(self)  # its metrics join the step's line as eval/<name>
        self._resumed_with = resume
        return self._trainer

    # ------------------------------------------------------------------ TRL's methods
    def train(self, resume_from_checkpoint=None, **_ignored):
        """Train to max_steps (or the epochs); ``resume_from_checkpoint``: True (the newest checkpoint of
        output_dir) or a checkpoint folder. Returns transformers' ``TrainOutput``."""
        from transformers.trainer_utils import TrainOutput

        trainer = self._built(resume_from_checkpoint if resume_from_checkpoint not in (None, False) else None)
        callbacks = trainer.callbacks
        callbacks.event("on_train_begin")
        history = trainer.train()
        self.state = self._state(trainer)
        callbacks.event("on_train_end", state=self.state)
        losses = [m["train/loss"] for m in history if m.get("train/loss") is not None]
        return TrainOutput(self.state.global_step, sum(losses) / len(losses) if losses else 0.0,
                           {"train_loss": sum(losses) / len(losses) if losses else 0.0})

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """TRL's rollout metrics on ``eval_dataset`` (module docstring), prefixed ``<metric_key_prefix>_``; a dict
        of datasets: each one's prefixed ``<metric_key_prefix>_<name>_``, as TRL does."""
        from rlvr.train.evaluation_trl import rollout_metrics

        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        if data is None:
            raise ValueError("evaluate() needs an eval_dataset (GRPOTrainer(eval_dataset=...) or evaluate(eval_dataset=...))")
        trainer = self._built(self._resumed_with)
        named = data if isinstance(data, dict) or (hasattr(data, "keys") and not hasattr(data, "column_names")) \
            else {None: data}
        metrics = {}
        for name, dataset in named.items():
            prefix = metric_key_prefix if name is None else f"{metric_key_prefix}_{name}"
            metrics |= {f"{prefix}_{k}": v for k, v in rollout_metrics(trainer, _rows(dataset)).items()}
        if self.state is not None:
            self.state.log_history.append({**metrics, "step": self.state.global_step})
        trainer.callbacks.event("on_evaluate", metrics=metrics)
        return metrics

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The policy (LoRA: its adapter) and tokenizer into ``output_dir`` (default: the run's output_dir)."""
        trainer = self._built(self._resumed_with)
        folder = Path(output_dir) if output_dir is not None else trainer.output_dir
        folder.mkdir(parents=True, exist_ok=True)
        trainer.policy.save_pretrained(folder)
        trainer.tokenizer.save_pretrained(folder)

    def add_callback(self, callback) -> None:
        if self._trainer is not None:
            raise RuntimeError("add callbacks before the first train() or model access")
        self.callbacks.append(callback() if isinstance(callback, type) else callback)

    @staticmethod
    def _state(trainer):
        """transformers' TrainerState as the last checkpoint's trainer_state.json holds it (optimiser steps)."""
        from transformers import TrainerState

        hf = trainer.checkpoints.hf_state(trainer.step_done, trainer.step_log.num_tokens)
        return TrainerState(**{k: v for k, v in hf.items() if k in TrainerState.__dataclass_fields__})


class _DuringTraining:
    """``eval_strategy: steps``: evaluate() every ``eval_steps`` optimiser steps, in the trainer's place for its
    training-time evaluation, so the metrics join the step's line (metrics.jsonl ``eval/<name>``; trackers
    ``eval/<name>``, as transformers tags ``eval_<name>``)."""

    def __init__(self, owner: GRPOTrainer):
        self.owner = owner

    def due(self, step: int) -> bool:
        owner, trainer = self.owner, self.owner._trainer
        every = owner._eval.get("eval_steps") or getattr(owner.args, "logging_steps", None) or 10  # TRL's fallback
        every = int(every) if every >= 1 else max(1, round(every * trainer.length.optimizer_steps))  # a ratio
        return trainer.length.counter(step) // every > trainer.length.counter(step - 1) // every

    def run(self, policy, tokenizer, output_dir, step: int) -> dict:
        metrics = self.owner.evaluate()
        return {"eval/" + key.removeprefix("eval_"): value for key, value in metrics.items()}


def lora_options(peft_config) -> dict:
    """rlvr's LoRA options for a peft ``LoraConfig``; a field rlvr has no counterpart for, set, is refused."""
    defaults = type(peft_config)()
    supported = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
                 "target_modules": "lora_target_modules"}
    ignored = {"task_type", "inference_mode", "peft_type", "base_model_name_or_path", "revision", "runtime_config"}
    for name, value in vars(peft_config).items():
        if name not in supported and name not in ignored and value != getattr(defaults, name, value):
            raise ValueError(f"peft_config.{name}={value!r}: rlvr's LoRA takes r, lora_alpha, lora_dropout and "
                             "target_modules only")
    targets = peft_config.target_modules
    if targets is not None and not isinstance(targets, str):
        targets = ",".join(sorted(targets))
    return {"lora_r": peft_config.r, "lora_alpha": peft_config.lora_alpha, "lora_dropout": peft_config.lora_dropout,
            "lora_target_modules": targets}


def _environment_rows(overrides: dict) -> list[dict]:
    """No train_dataset, as TRL allows with one environment that owns the data (its ``reset`` returns the prompt):
    one generation batch of empty user prompts, gone through again every step (TRL's placeholder dataset)."""
    from rlvr.config import build_config
    from rlvr.config.experiment import configured_world_size

    if isinstance(overrides["environment_factory"], dict):
        raise ValueError("A dict environment_factory (several environments) needs a train_dataset with an "
                         "'environment' column to route each row; give one, or a single environment factory")
    if not overrides.get("max_steps", -1) > 0:
        raise ValueError("Without a train_dataset (the environment owns the data and returns the prompt from "
                         "reset()), max_steps must be set to a positive value: GRPOConfig(max_steps=...)")
    cfg = build_config({**overrides, "data": [{"prompt": ""}]})  # the batch arithmetic
    prompts = cfg.batch_shape(configured_world_size(cfg.run.nproc)).prompts_per_step
    return [{"prompt": [{"role": "user", "content": ""}]} for _ in range(prompts)]


def _train_rows(data, overrides: dict):
    """The train set as rlvr takes it; an ``IterableDataset`` (a stream) as TRL 1.16 takes one: ``max_steps`` must be
    set, since its length is unknown, and the run reads the rows its steps consume (``max_steps`` generation
    batches of prompts), not the whole stream — which may be endless. rlvr then shuffles those rows (TRL: a
    buffered shuffle of the stream); a shorter stream is gone through again, epoch after epoch, as TRL's is."""
    if not _is_stream(data):
        return _rows(data)
    from rlvr.config import build_config
    from rlvr.config.experiment import configured_world_size
    from rlvr.train.plan import stream_rows

    cfg = build_config({**overrides, "data": [{"prompt": ""}]})  # the batch arithmetic, before any row is read
    needed = stream_rows(cfg, cfg.batch_shape(configured_world_size(cfg.run.nproc)))
    rows = [dict(row) for row in itertools.islice(data, needed)]
    if not rows:
        raise ValueError("train_dataset is an IterableDataset that yields no rows")
    return rows


def _is_stream(data) -> bool:
    """A ``datasets.IterableDataset`` (or another iterable of rows without a length)."""
    return not isinstance(data, (list, tuple, dict)) and not hasattr(data, "__len__") and hasattr(data, "__iter__")


def _rows(data):
    """What rlvr takes as in-memory data: a Dataset or a list of rows (an IterableDataset is read whole)."""
    if isinstance(data, (list, tuple)) or hasattr(data, "column_names") and hasattr(data, "__len__"):
        return data
    if hasattr(data, "keys") and hasattr(data, "values"):
        raise TypeError("pass one split as the dataset (e.g. dataset['train']), not the whole DatasetDict")
    if hasattr(data, "__iter__"):  # datasets.IterableDataset
        return [dict(row) for row in data]
    raise TypeError(f"a dataset must be a datasets.Dataset, an IterableDataset or a list of row dicts, "
                    f"got a {type(data).__name__}")


def show_rlvr_logs() -> None:
    """rlvr's INFO lines (the start-up and batch lines) on stderr, as transformers prints its own, unless the
    script configured logging itself (a root handler)."""
    root, library = logging.getLogger(), logging.getLogger("rlvr")
    if root.handlers or library.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False
