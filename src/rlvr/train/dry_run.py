"""``rlvr train --dry-run``: everything a run resolves before its model loads, checked, without a model.

The resolved config, and then what would fail minutes later: the data (its rows, the prompt column, the
chat open-r1 builds), every reward function by name (TRL's, open-r1's, a module in the working
directory, a file) and the dataset columns each needs, the step's batch and the run's length as TRL
counts them. A problem is a ValueError naming it and the fix, as the run itself would raise.
"""

from __future__ import annotations

import inspect

from rlvr.config import ExperimentConfig
from rlvr.config.experiment import configured_world_size
from rlvr.data import load_python_rows, load_rows, reward_columns
from rlvr.rewards import resolve_reward
from rlvr.rewards.registry import logged_names
from rlvr.train.plan import run_length
from rlvr.train.prompt_builder import chat_rows, question_rows

# keyword arguments every reward function gets besides the dataset's columns (TRL 1.16's)
_CALL_ARGUMENTS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"}


class _NoPool:
    """A stand-in verifier pool: resolving ``accuracy`` needs one, checking it does not."""

    def verify_batch(self, golds, preds):  # pragma: no cover - never called
        raise AssertionError("a dry run verifies nothing")


def dry_run_report(cfg: ExperimentConfig) -> list[str]:
    """Lines describing what the run would do; ValueError for what would make it fail."""
    rows = load_python_rows(cfg.python.data) if cfg.python.data is not None else load_rows(cfg.data.data)
    rows = chat_rows(question_rows(rows, cfg), cfg)
    names = check_reward_functions(cfg, rows)
    batch = cfg.batch_shape(configured_world_size(cfg.run.nproc))
    length = run_length(cfg, batch, len(rows))
    check_scheduler(cfg, length.steps * length.optimizer_steps_per_step)
    return [
        f"data: {len(rows)} rows of {cfg.data.data}; prompts are {_prompt_kind(rows)}",
        f"reward functions: {', '.join(names)}",
        (f"each step: {batch.prompts_per_step} prompts x {batch.completions_per_prompt} completions, micro-batches of "
        f"{batch.micro_batch} on {batch.world_size} process(es), {batch.optimizer_steps_per_pass} optimiser step(s) "
        f"per pass; {length.steps} steps ({length.steps_per_epoch} per epoch)"),
    ]


def check_reward_functions(cfg: ExperimentConfig, rows: list[dict]) -> list[str]:
    """Resolve every reward function by name and check the rows have the columns each needs, without a
    model (the trainer calls it before loading one); their logged names. ValueError naming the problem."""
    funcs = [resolve_reward(cfg.python.reward(spec), _NoPool(), answer_extraction=cfg.reward.answer_extraction,
                            names=cfg.run.preset) for spec in cfg.reward.reward_funcs]
    columns = set().union(*(reward_columns(row) for row in rows))
    names = logged_names(funcs)
    for name, fn in zip(names, funcs):
        missing = sorted(set(needed_columns(fn)) - columns - _CALL_ARGUMENTS)
        if missing:
            raise ValueError(f"reward function {name} needs the dataset column(s) {missing}, which {cfg.data.data} "
                             f"lacks (it has {sorted(columns)}); use data with them, or another reward function")
    return names


def check_scheduler(cfg: ExperimentConfig, total_steps: int) -> None:
    """Build the learning-rate schedule on a stand-in parameter: lr_scheduler_kwargs a schedule does not take
    fail here, not after the model loads."""
    import torch

    from rlvr.train.optimizer import build_scheduler

    build_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.optim.learning_rate), cfg.optim,
                    max(1, total_steps))


def needed_columns(fn) -> tuple[str, ...]:
    """The columns a reward function needs: its ``required_columns``, and its parameters without a default."""
    declared = tuple(getattr(fn, "required_columns", ()))
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return declared
    required = tuple(p.name for p in parameters if p.default is inspect.Parameter.empty
                     and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return declared + required


def _prompt_kind(rows: list[dict]) -> str:
    chats = sum(isinstance(row["prompt"], list) for row in rows)
    return "chats" if chats == len(rows) else "plain strings" if chats == 0 else f"{chats} chats, the rest strings"
