"""The shape of a step, as TRL 1.16's ``GRPOConfig`` computes it: prompts, micro-batches, optimiser steps.

TRL's names and meanings (W processes; every number but ``generation_batch_size`` is per process):

    per_device_train_batch_size   P   completions per forward/backward micro-batch
    gradient_accumulation_steps   A   micro-batches per optimiser step
    steps_per_generation          S   micro-batches made of one step's completions (default A)
    generation_batch_size        GB   completions per step = P·W·S (given instead of S: S = GB / (P·W))
    num_generations               G   completions per prompt, so B = GB / G prompts per step

One pass over a step's completions takes S / A optimiser steps (``num_iterations`` passes).

rlvr's ``prompts_per_step`` B fixes GB = B·G instead (preset=rlvr, or given with preset=trl, where it
must agree with the above). The TRL-named options keep their meaning; what is not given is derived:
P alone gives S = GB / (W·P) and, A unset, one optimiser step per pass (A = S); S alone gives
P = GB / (W·S) and A = 1 (TRL's default: S optimiser steps); neither gives one micro-batch and one
optimiser step. TA-GRPO's pools count (N+1)·G completions per prompt.

Convention: every division must be exact, as TRL requires; rlvr keeps a prompt's completions on one
process (TRL may split them), so a process's share of a step must be whole prompts too.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import _fail

TRL_MICRO_BATCH = 8  # TRL's per_device_train_batch_size default (preset=trl sets it)


@dataclass(frozen=True)
class BatchShape:
    """A step's batch: B prompts, P completions per micro-batch, S micro-batches per process, A per optimiser step."""

    prompts_per_step: int  # B
    completions_per_prompt: int  # G, or (N+1)·G for TA-GRPO pools
    micro_batch: int  # P
    micro_batches: int  # S, per process
    accumulation: int  # A
    world_size: int  # W

    @property
    def completions(self) -> int:
        """Completions per step, every process together (TRL's generation_batch_size)."""
        return self.prompts_per_step * self.completions_per_prompt

    @property
    def completions_per_process(self) -> int:
        return self.completions // self.world_size

    @property
    def optimizer_steps_per_pass(self) -> int:
        return self.micro_batches // self.accumulation


def batch_shape(*, prompts_per_step: int | None, num_generations: int, variants: int = 1,
                per_device_train_batch_size: int | None, gradient_accumulation_steps: int | None,
                steps_per_generation: int | None, generation_batch_size: int | None = None,
                world_size: int = 1) -> BatchShape:
    """Resolve the step's batch from the options given (None: not given); ValueError naming the option and
    the fix when they do not fit together.

    ``variants``: completions per prompt per G (TA-GRPO: N+1 variants when pooled, else 1).
    """
    per_prompt, w = num_generations * variants, world_size
    p, a, s = per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation
    if generation_batch_size is not None and s is not None:
        _fail("generation_batch_size", generation_batch_size, "TRL takes generation_batch_size or "
              "steps_per_generation, not both: drop one")
    if prompts_per_step is None:  # TRL's way: the micro-batches make the step
        p = p if p is not None else TRL_MICRO_BATCH
        a = a if a is not None else 1
        if generation_batch_size is not None:
            s = _exact(generation_batch_size, p * w, f"generation_batch_size={generation_batch_size} must be a multiple "
                       f"of per_device_train_batch_size x processes = {p * w} (TRL's rule)")
        s = s if s is not None else a
        prompts_per_step = _exact(p * w * s, per_prompt, f"per_device_train_batch_size x processes x "
                                  f"steps_per_generation = {p} x {w} x {s} = {p * w * s} completions per step must be "
                                  f"whole prompts of num_generations{' x variants' if variants > 1 else ''} = "
                                  f"{per_prompt} completions (TRL's rule): change one of them")
    else:
        if generation_batch_size is not None and generation_batch_size != prompts_per_step * per_prompt:
            _fail("generation_batch_size", generation_batch_size, f"prompts_per_step={prompts_per_step} makes "
                  f"{prompts_per_step * per_prompt} completions per step: drop one of the two")
        per_process = _exact(prompts_per_step * per_prompt, w, f"prompts_per_step={prompts_per_step}: its "
                             f"{prompts_per_step * per_prompt} completions must share out evenly over the {w} processes")
        if p is not None and s is not None and p * s != per_process:
            _fail("steps_per_generation", s, f"per_device_train_batch_size x steps_per_generation = {p * s}, but each "
                  f"process has {per_process} completions per step (prompts_per_step x num_generations / "
                  "processes); set only one of the two")
        if p is None:
            s = s if s is not None else 1
            p = _exact(per_process, s, f"steps_per_generation={s} must divide the {per_process} completions each "
                       "process has per step (prompts_per_step x num_generations / processes)")
            a = a if a is not None else (1 if steps_per_generation is not None else s)
        else:
            s = _exact(per_process, p, f"per_device_train_batch_size={p} must divide the {per_process} completions "
                       "each process has per step (prompts_per_step x num_generations / processes)")
            a = a if a is not None else s
    if s % a:
        _fail("gradient_accumulation_steps", a, f"each process makes {s} micro-batches per step "
              "(steps_per_generation), which must be a whole number of optimiser steps of "
              "gradient_accumulation_steps micro-batches (TRL would accumulate across steps, rlvr does not): "
              f"use a divisor of {s}")
    if prompts_per_step % w:
        _fail("prompts_per_step", prompts_per_step, f"rlvr keeps a prompt's completions on one process: the "
              f"{prompts_per_step} prompts of a step must share out evenly over the {w} processes")
    return BatchShape(prompts_per_step=prompts_per_step, completions_per_prompt=per_prompt, micro_batch=p,
                      micro_batches=s, accumulation=a, world_size=w)


def _exact(total: int, part: int, message: str) -> int:
    """total / part, which must be a whole number (ValueError with ``message`` otherwise)."""
    if part < 1 or total % part:
        raise ValueError(message)
    return total // part
