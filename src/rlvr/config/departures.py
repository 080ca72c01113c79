"""Where a TRL-shaped config runs differently from TRL 1.16: the departures of docs/from_trl.md ("Where the
numbers differ, and why"; "Keys TRL 1.16 drops") that apply to a given config, for its start-up line.

Each entry is (does it apply to this config?, what differs); only those that apply are named, so a line
that names none means the config runs as TRL 1.16 would, up to sampling.
Plain Python, no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.config.experiment import configured_world_size


def _optimizer_steps_per_step(cfg) -> int:
    return cfg.batch_shape(configured_world_size(cfg.run.nproc)).optimizer_steps_per_pass * cfg.algorithm.num_iterations


def _set(cfg, name: str) -> bool:
    return name in cfg.origin.user_keys


# (does this departure apply to cfg?, what it is)
DEPARTURES: list[tuple[Callable[[Any], bool], Callable[[Any], str]]] = [
    (lambda c: _set(c, "warmup_ratio") and c.optim.warmup_ratio > 0,
     lambda c: f"warmup_ratio={c.optim.warmup_ratio:g} warms up (TRL 1.16 drops the key)"),
    (lambda c: c.rollout.max_prompt_length is not None,
     lambda c: f"max_prompt_length={c.rollout.max_prompt_length} applies (truncation={c.rollout.truncation}; "
               "TRL 1.16 drops the key and tokenizes a prompt whole)"),
    (lambda c: c.algorithm.loss_type == "bnpo" or c.algorithm.entropy_coef > 0,
     lambda c: "micro-batches keep a prompt's completions together, cut by length (TRL: shuffled), and "
               f"{'bnpo' if c.algorithm.loss_type == 'bnpo' else 'the entropy bonus'} is per micro-batch"),
    (lambda c: _optimizer_steps_per_step(c) > 1,
     lambda c: f"{_optimizer_steps_per_step(c)} optimiser steps per step see whole groups (TRL: random "
               "completions)"),
    (lambda c: c.algorithm.scale_rewards != "none",
     lambda c: "a group of equal rewards gets advantages of exactly 0 (TRL: float32 noise)"),
    (lambda c: not c.model.disable_dropout,
     lambda c: "the policy runs without dropout (disable_dropout=false only warns)"),
    (lambda c: c.eval.enabled, lambda c: "evaluation reports pass@k (TRL: the loss and rewards)"),
    (lambda c: c.data.shuffle, lambda c: "another shuffle draws the prompts of each step"),
    (lambda c: c.run.max_steps == -1,
     lambda c: "an epoch's last prompts that do not fill a step start the next epoch (TRL drops them)"),
    (lambda c: "num_processes" in c.origin.trl_keys,
     lambda c: f"num_processes={c.run.nproc} is nproc: rlvr launches the processes under torchrun, not accelerate"),
    (lambda c: configured_world_size(c.run.nproc) > 1,
     lambda c: "each process averages its own micro-batch metrics before they are reduced"),
]


def trl_departures(cfg) -> list[str]:
    """What differs from TRL 1.16 for this config (docs/from_trl.md), in the order of :data:`DEPARTURES`."""
    return [what(cfg) for applies, what in DEPARTURES if applies(cfg)]
