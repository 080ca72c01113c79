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
``peft_config`` a peft ``LoraConfig`` (its r, alpha, dropout, target modules, use_rslora, use_dora and
modules_to_save); ``callbacks``
transformers ``TrainerCallback`` objects, called on train begin/end, step end, log, save and evaluate.
``train()`` returns transformers' ``TrainOutput`` and leaves ``state.log_history`` as TRL's (rlvr.train.trl_log: an
entry every ``logging_steps``, TRL's keys, the end-of-training entry last).
rlvr's :class:`~rlvr.train.trainer.Trainer` is built at the first ``train()`` (or ``model`` access), so
``train(resume_from_checkpoint=True)`` on an output_dir with checkpoints resumes as TRL's does. The output folder is
TRL's: checkpoints as ``save_strategy`` asks, each with training_args.bin (``args``), the model card README.md at
output_dir, and the model at output_dir's top only when the script calls ``save_model()``.

``evaluate()`` is TRL's: ``eval_dataset``'s prompts sampled (``num_generations_eval`` each) in batches of
``per_device_eval_batch_size``, scored with the run's reward functions, TRL's loss and metrics of each batch, as
``eval_loss``, ``eval_runtime``, ..., ``eval_reward``, ``eval_entropy``, ... (rlvr.trl_api.evaluation); with
``eval_strategy`` steps or epoch (``eval_steps``, ``eval_delay``) and ``eval_on_start`` it runs during training too,
each an entry of its own in ``state.log_history``, the trackers and the callbacks. Arguments TRL takes that rlvr
has no counterpart for (a reward model, custom optimisers, a rollout function, quantisation) are refused
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
from rlvr.trl_api.evaluation import (
    EVAL_DEFAULTS,
    MODEL_PREPARATION,
    TrainingEvaluation,
    eval_options,
    evaluate_datasets,
    log_entry,
    merged,
)

logger = logging.getLogger(__name__)

# TRL's evaluation keys: this class runs TRL's evaluation on eval_dataset itself (rlvr.trl_api.evaluation; rlvr's
# own eval_data evaluation is pass@k with the verifier)
EVAL_KEYS = tuple(EVAL_DEFAULTS)
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
        self._eval = eval_options({key: overrides.pop(key) for key in EVAL_KEYS if key in overrides}, overrides,
                                  has_dataset=eval_dataset is not None)  # refused now, as TRL's Trainer refuses it
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
        from rlvr.train.checkpointing import Outputs
        from rlvr.train.evaluation_trl import trl_evaluation
        from rlvr.train.trainer import Trainer

        if self._trainer is not None and (resume is None or resume == self._resumed_with):
            return self._trainer
        if self._trainer is not None:
            self._trainer.close()
        cfg = self.cfg
        if resume is not None:
            extra = {"resume": True} if resume is True else {"resume_from_checkpoint": str(resume)}
            cfg = build_config({**self._overrides, **extra})
        # TRL's output folder: training_args.bin holds args; the model at output_dir only from save_model(). The
        # folder is checked when training starts: trainer.model may be read before train(resume_from_checkpoint=...)
        outputs = Outputs(training_args=self.args, final_model=False, folder_check_first=False)
        self._trainer = Trainer(cfg, callbacks=self.callbacks, outputs=outputs)
        if self.eval_dataset is not None and (self._eval.strategy != "no" or self._eval.on_start):
            # (rlvr's own eval_data evaluation is off here: a GRPOConfig has no such key, and EVAL_KEYS are TRL's)
            self._trainer.evaluation = TrainingEvaluation(self._trainer, self._eval, self.eval_dataset,
                                                          trl_evaluation)
        self._resumed_with = resume
        return self._trainer

    # ------------------------------------------------------------------ TRL's methods
    def train(self, resume_from_checkpoint=None, **_ignored):
        """Train to max_steps (or the epochs); ``resume_from_checkpoint``: True (the newest checkpoint of
        output_dir) or a checkpoint folder. Returns transformers' ``TrainOutput(global_step, training_loss,
        metrics)``, its metrics the end-of-training entry of TRL's log (rlvr.train.trl_log) without its step."""
        from transformers.trainer_utils import TrainOutput

        trainer = self._built(resume_from_checkpoint if resume_from_checkpoint not in (None, False) else None)
        callbacks = trainer.callbacks
        callbacks.event("on_train_begin")
        trainer.train()
        self.state = self._state(trainer)
        callbacks.event("on_train_end", state=self.state)
        metrics = dict(trainer.logs.summary)
        return TrainOutput(self.state.global_step, metrics["train_loss"], metrics)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """TRL's evaluation of ``eval_dataset`` (default: the trainer's; a dict of datasets: each one's
        ``<metric_key_prefix>_<name>_loss``, ...): ``<metric_key_prefix>_loss``, the speed metrics, TRL's
        ``eval_<name>`` batch metrics and ``epoch``, logged as transformers logs an evaluation
        (rlvr.trl_api.evaluation); ``ignore_keys`` concerns model outputs, which TRL's evaluation has none of."""
        data = eval_dataset if eval_dataset is not None else self.eval_dataset
        if data is None:
            raise ValueError("evaluate() needs an eval_dataset (GRPOTrainer(eval_dataset=...) or evaluate(eval_dataset=...))")
        trainer = self._built(self._resumed_with)
        step = getattr(trainer, "step_done", 0)
        if self.state is None and (not self._overrides.get("beta") or "lora_r" in self._overrides):
            setattr(trainer, MODEL_PREPARATION, 0.0)  # TRL's accelerator has no model prepared yet (evaluation.py)
        from rlvr.train.evaluation_trl import trl_evaluation

        entries = evaluate_datasets(trainer, data, self._eval.settings, trl_evaluation, step=step,
                                    prefix=metric_key_prefix, preparation_time=getattr(trainer, MODEL_PREPARATION, None))
        history = self.state.log_history if self.state is not None else []  # (before train(): TRL's state is new at
        # train(), so its log_history starts without this entry)
        for entry in entries:
            log_entry(trainer, entry, step=step, live=False, history=history)
        return merged(entries)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The policy (LoRA: its adapter), tokenizer and training_args.bin into ``output_dir`` (default: the run's
        output_dir, whose final model it then is), as transformers' ``Trainer.save_model`` writes them."""
        trainer = self._built(self._resumed_with)
        trainer.checkpoints.save_model(Path(output_dir) if output_dir is not None else trainer.output_dir)

    def add_callback(self, callback) -> None:
        if self._trainer is not None:
            raise RuntimeError("add callbacks before the first train() or model access")
        self.callbacks.append(callback() if isinstance(callback, type) else callback)

    @staticmethod
    def _state(trainer):
        """transformers' TrainerState as the last checkpoint's trainer_state.json holds it (optimiser steps), and the
        end-of-training entry after its log_history, as ``trainer.state`` after TRL's ``train()``."""
        from transformers import TrainerState

        hf = trainer.checkpoints.hf_state(trainer.step_done, trainer.step_log.num_tokens)
        if trainer.logs.trl_log.summary_entry is not None:
            hf["log_history"].append(dict(trainer.logs.trl_log.summary_entry))
        return TrainerState(**{k: v for k, v in hf.items() if k in TrainerState.__dataclass_fields__})


# peft LoraConfig field -> rlvr's option (the same meaning: rlvr builds the LoraConfig from them, models/loading.py)
LORA_FIELDS = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
               "target_modules": "lora_target_modules", "use_rslora": "use_rslora", "use_dora": "use_dora",
               "modules_to_save": "lora_modules_to_save"}


def lora_options(peft_config) -> dict:
    """rlvr's LoRA options for a peft ``LoraConfig``; a field rlvr has no counterpart for, set, is refused."""
    defaults = type(peft_config)()
    ignored = {"task_type", "inference_mode", "peft_type", "base_model_name_or_path", "revision", "runtime_config"}
    for name, value in vars(peft_config).items():
        if name not in LORA_FIELDS and name not in ignored and value != getattr(defaults, name, value):
            raise ValueError(f"peft_config.{name}={value!r}: rlvr's LoRA takes {', '.join(LORA_FIELDS)} only")
    options = {option: getattr(peft_config, name) for name, option in LORA_FIELDS.items()}
    for option in ("lora_target_modules", "lora_modules_to_save"):  # peft's lists and sets: rlvr's comma lists
        if options[option] is not None and not isinstance(options[option], str):
            options[option] = ",".join(sorted(options[option]))
    return options


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
