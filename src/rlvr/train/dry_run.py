"""``rlvr train --dry-run``: everything a run resolves before its model loads, checked, without a model.

The resolved config, and then what would fail minutes later: the data (its rows, the prompt column, the
chat open-r1 builds), every reward function by name (TRL's, open-r1's, a module in the working
directory, a file) and the dataset columns each needs, the step's batch and the run's length as TRL
counts them, and whether a step's completions can fit in memory (rlvr.train.memory_bound). A problem
is a ValueError naming it and the fix, as the run itself would raise.
"""

from __future__ import annotations

from rlvr.config import ExperimentConfig
from rlvr.config.experiment import configured_world_size
from rlvr.data import load_python_rows, load_rows
from rlvr.train.memory_bound import check_rollout_memory
from rlvr.train.plan import compile_plan, run_length
from rlvr.train.setup import (
    chat_rows,
    check_optional_packages,
    check_reward_functions,
    check_scheduler,
    question_rows,
    row_rules,
)


def dry_run_report(cfg: ExperimentConfig) -> list[str]:
    """Lines describing what the run would do; ValueError for what would make it fail."""
    plan = compile_plan(cfg, world_size=configured_world_size(cfg.run.nproc))
    batch = plan.batch
    check_rollout_memory(completions_per_process=batch.completions_per_process,
                         max_completion_length=plan.rollout.max_completion_length)  # before the data loads
    rules = row_rules(cfg)
    rows = (load_python_rows(cfg.python.data, **rules) if cfg.python.data is not None
            else load_rows(cfg.data.data, **rules))
    rows = chat_rows(question_rows(rows, cfg), cfg)
    names = check_reward_functions(cfg, rows)
    tools = plan.rollout.tools
    if tools is not None and tools.environments is not None:  # get_reward: one more reward, named after its class
        names += [f"{fn.__name__} (the environment's get_reward)" for fn in tools.environments.reward_functions()]
    check_optional_packages(cfg)
    length = run_length(cfg, batch, len(rows))
    check_scheduler(cfg, length.steps * length.optimizer_steps_per_step)
    return [
        f"data: {len(rows)} rows of {cfg.data.data}; prompts are {_prompt_kind(rows)}",
        f"reward functions: {', '.join(names)}",
        (f"each step: {batch.prompts_per_step} prompts x {batch.completions_per_prompt} completions, micro-batches of "
        f"{batch.micro_batch} on {batch.world_size} process(es), {batch.optimizer_steps_per_pass} optimiser step(s) "
        f"per pass; {length.steps} steps ({length.steps_per_epoch} per epoch)"),
        *(f"warning: {ignored}" for ignored in plan.engine.ignored),
    ]


def _prompt_kind(rows: list[dict]) -> str:
    chats = sum(isinstance(row["prompt"], list) for row in rows)
    return "chats" if chats == len(rows) else "plain strings" if chats == 0 else f"{chats} chats, the rest strings"
