"""Evaluation during training: when (:class:`EvalSchedule`, TRL's ``eval_strategy``, ``eval_steps``, ``eval_delay``
and ``eval_on_start``), and rlvr's pass@k on ``eval_data`` (:class:`TrainingEval`; TRL's own evaluation of the
Python API is rlvr.train.evaluation_trl).

Each pass@k evaluation writes ``<output_dir>/eval/step-000010.json`` (the ``rlvr eval`` format, with its
resumable per-problem file beside it) and returns ``eval/<dataset>/pass@<k>`` metrics for
metrics.jsonl. The prompt template is the training one (same system prompt and instruction), so
training and evaluation ask the same way. Sampling seeds depend only on (seed, dataset, problem),
never on the training RNG, and training re-seeds before each of its own generations.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.data import PromptFormat
from rlvr.eval.runner import EvalSettings, evaluate, load_eval_datasets
from rlvr.parallel.runtime import full_weights
from rlvr.train.eval_schedule import EvalSchedule
from rlvr.train.plan import RunLength

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingEval:
    """What to evaluate during training (pass@k), and when (built once from the eval options at start-up)."""

    datasets: tuple[str, ...]
    schedule: EvalSchedule
    length: RunLength
    n: int
    ks: tuple[int, ...]
    temperature: float
    top_p: float
    max_completion_length: int
    limit: int | None
    prompt_format: PromptFormat  # the training one (template or raw text, instruction), so both ask the same way
    answer_extraction: str
    seed: int
    model_name: str
    tools: str | None = None  # the run's tools: its evaluations answer with them too
    max_tool_calling_iterations: int | None = None
    tool_output_chars: int = 1024

    in_line = True  # its metrics join the step's metrics.jsonl line (the loop's protocol, rlvr.train.trainer)

    @property
    def on_start(self) -> bool:
        return self.schedule.on_start

    def due(self, step: int) -> bool:
        return self.schedule.due(self.length, step)

    def settings(self, step: int) -> EvalSettings:
        """The evaluation's settings at ``step`` (the model is recorded with its step)."""
        return EvalSettings(
            n=self.n, ks=self.ks, temperature=self.temperature, top_p=self.top_p,
            max_completion_length=self.max_completion_length, instruction=self.prompt_format.instruction,
            system_prompt=self.prompt_format.system_prompt, answer_extraction=self.answer_extraction, seed=self.seed,
            limit=self.limit, model_name=f"{self.model_name} (step {step})",
            chat_template_kwargs=self.prompt_format.chat_template_kwargs, raw_strings=self.prompt_format.raw_strings,
            tools=self.tools, max_tool_calling_iterations=self.max_tool_calling_iterations,
            tool_output_chars=self.tool_output_chars,
        )

    def run(self, policy, tokenizer, output_dir: Path, step: int) -> dict[str, float]:
        """Evaluate the current policy; return eval/ metrics."""
        t0 = time.perf_counter()
        result = evaluate(policy, tokenizer, list(self.datasets), self.settings(step),
                          out_path=output_dir / "eval" / f"step-{step:06d}.json", progress=False)
        metrics = {
            f"eval/{name}/pass@{k}": value
            for name, summary in result["datasets"].items()
            for k, value in summary["pass@k"].items()
        }
        metrics["time/eval_s"] = time.perf_counter() - t0
        return metrics


def evaluate_due(trainer, step: int, *, in_line: bool = False, at_start: bool = False) -> dict:
    """``trainer.evaluation`` (rlvr's pass@k, TRL's of the Python API, or None) when it is due after ``step``
    (``at_start``: before the first step, TRL's eval_on_start), run by rank 0 with the weights gathered on every
    rank (FSDP2); its ``eval/<name>`` metrics ({} when none ran). The loop calls it before the step's line is
    written (``in_line``: pass@k's metrics join the line) and after it (TRL's, which logs an entry of its own,
    rlvr.trl_api.evaluation); pass@k's before the first step, with no line to join, go to the trackers.

    The evaluation's protocol: ``on_start`` and ``in_line`` (bools), ``due(step)`` and
    ``run(policy, tokenizer, output_dir, step) -> dict``."""
    e = trainer.evaluation
    if e is None or not (e.on_start if at_start else e.in_line == in_line and e.due(step)):
        return {}
    with full_weights(trainer.policy):
        metrics = e.run(trainer.policy, trainer.tokenizer, trainer.output_dir, step) if trainer.dist.is_main else {}
        trainer.dist.barrier()
    if at_start and e.in_line and trainer.dist.is_main:
        trainer.trackers.log_step(trainer.length.counter(step), metrics, [])
    return metrics


def training_overlap(train_rows: list[dict], eval_specs: list[str], *, limit: int | None) -> dict[str, int]:
    """Per eval dataset: how many of its problems are also training prompts (a warning for each > 0).

    The usual way to get one: another reasoning-gym seed. reasoning-gym seeds item i with seed + i,
    so ``rg:chain_sum:seed=99`` is the ``seed=0`` list shifted by 99, not new problems.
    """
    seen = {str(row["prompt"]) for row in train_rows}
    overlap = {}
    for name, rows in load_eval_datasets(eval_specs, limit=limit).items():
        overlap[name] = sum(str(row["prompt"]) in seen for row in rows)
        if overlap[name]:
            logger.warning(
                "eval_data %s: %d of its %d problems are training prompts, so it measures memorisation as "
                "much as generalisation. For reasoning-gym, item i is seeded with seed + i: choose an eval "
                "seed beyond the training seed + size (e.g. seed=1000000), or filter with "
                "experiments/make_heldout.py", name, overlap[name], len(rows))
    return overlap
