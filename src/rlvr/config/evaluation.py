"""Evaluation during training: pass@k on held-out data, when TRL's ``eval_strategy``, ``eval_steps``,
``eval_delay`` and ``eval_on_start`` say (rlvr.train.evaluation.EvalSchedule decides it as transformers does)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlvr.config.fields import _f, _fail

EVAL_STRATEGIES = ("no", "steps", "epoch")
EVAL_MODES = ("passk", "trl")
# pass@k's own settings: TRL's evaluation samples as the training does (eval_mode=trl refuses them set)
PASSK_ONLY = {"eval_k": [1, 2, 4], "eval_temperature": 0.6, "eval_top_p": 0.95, "eval_max_completion_length": None,
              "eval_limit": None}


@dataclass(frozen=True)
class EvalConfig:
    eval_strategy: str = _f("steps", "when to evaluate (TRL name): steps (every eval_steps and at the end) | epoch (at "
                                     "the end of every epoch and of training) | no")
    eval_steps: float = _f(0, "evaluate every K steps and at the end (0: never; K >= max_steps: only at the end; a "
                              "fraction below 1: of the run's steps, rounded up, as transformers) (TRL name)")
    eval_delay: float = _f(0.0, "evaluate only from this many steps on (eval_strategy=steps) or epochs (epoch) (TRL "
                                "name)")
    eval_on_start: bool = _f(False, "also evaluate before the first step (and on resume, before the next), whatever "
                                    "eval_strategy says (TRL name)")
    eval_data: list[str] = _f([], "datasets to evaluate on (same forms as data=, or a benchmark name); "
                                  "needs eval_steps >= 1")
    eval_mode: str = _f("passk", "passk: pass@k with the verifier (rlvr's), the metrics in the step's line | trl: "
                                 "TRL's evaluation, an eval_* entry of its own with TRL's loss and rollout metrics "
                                 "on the eval data's prompts (a TRL recipe's eval_strategy chooses it)")
    per_device_eval_batch_size: int = _f(8, "eval_mode=trl: completions per evaluation batch, a multiple of eval_n "
                                            "(TRL name)")
    eval_n: int = _f(4, "samples per problem (eval_mode=trl: TRL's num_generations_eval)")
    eval_k: list[int] = _f([1, 2, 4], "k values of pass@k (each <= eval_n)")
    eval_temperature: float = _f(0.6, "sampling temperature for evaluation")
    eval_top_p: float = _f(0.95, "nucleus p for evaluation")
    eval_max_completion_length: int | None = _f(None, "response budget (default: max_completion_length)")
    eval_limit: int | None = _f(None, "evaluate only the first N problems of each dataset")

    @property
    def enabled(self) -> bool:
        return (self.eval_strategy == "epoch" or (self.eval_strategy == "steps" and self.eval_steps > 0)
                or self.eval_on_start)

    def __post_init__(self) -> None:
        if self.eval_strategy not in EVAL_STRATEGIES:
            _fail("eval_strategy", self.eval_strategy, f"choose one of {EVAL_STRATEGIES}")
        if not 0 <= self.eval_steps < math.inf or (self.eval_steps > 1 and self.eval_steps != int(self.eval_steps)):
            _fail("eval_steps", self.eval_steps, "use 0 (off), a whole number of steps, or a fraction below 1 of the "
                  "run's steps")
        if self.eval_delay < 0:
            _fail("eval_delay", self.eval_delay, "use 0 or a positive number of steps (epochs with eval_strategy=epoch)")
        if self.eval_strategy == "no" and (self.eval_steps or self.eval_delay or (self.eval_data and not self.eval_on_start)):
            _fail("eval_strategy", "no", "evaluates nothing during training, so eval_steps/eval_delay/eval_data are "
                  "unused: use eval_strategy=steps or epoch (or eval_on_start=true with eval_data), or drop them")
        if self.enabled and not self.eval_data:
            _fail("eval_data", self.eval_data, "name at least one dataset, e.g. eval_data=gsm8k-100")
        if self.eval_strategy == "steps" and self.eval_data and not self.eval_steps:
            _fail("eval_steps", self.eval_steps, f"0 never evaluates, so eval_data={self.eval_data} is unused: set "
                  "eval_steps=K to evaluate every K steps and at the end (K >= max_steps: only at the end), or "
                  "drop eval_data (and run `rlvr eval` on the saved model)")
        if self.eval_n < 1 or (self.eval_mode == "passk" and (not self.eval_k or any(k < 1 or k > self.eval_n
                                                                                    for k in self.eval_k))):
            _fail("eval_k", (self.eval_k, self.eval_n), "every k must be between 1 and eval_n")
        if self.eval_temperature < 0 or not 0 < self.eval_top_p <= 1:
            _fail("eval_temperature/eval_top_p", (self.eval_temperature, self.eval_top_p),
                  "use temperature >= 0 (0: greedy) and top_p in (0, 1]")
        if self.eval_limit is not None and self.eval_limit < 1:
            _fail("eval_limit", self.eval_limit, "use a positive count or null")
        if self.eval_mode not in EVAL_MODES:
            _fail("eval_mode", self.eval_mode, f"choose one of {EVAL_MODES}")
        if self.eval_mode == "trl":
            self._check_trl_mode()

    def _check_trl_mode(self) -> None:
        if self.per_device_eval_batch_size < 1 or self.per_device_eval_batch_size % self.eval_n:
            _fail("per_device_eval_batch_size", self.per_device_eval_batch_size, f"an evaluation batch holds whole "
                  f"groups, as TRL requires: use a positive multiple of eval_n (num_generations_eval) = {self.eval_n}")
        given = [name for name, default in PASSK_ONLY.items() if getattr(self, name) != default]
        if given:
            _fail(given[0], getattr(self, given[0]), "pass@k's setting; eval_mode=trl evaluates as TRL does (sampling "
                  "as the training does, TRL's loss and rollout metrics): drop it, or use eval_mode=passk")
