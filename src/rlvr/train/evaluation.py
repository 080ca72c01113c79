"""Evaluation during training: pass@k on ``eval_data`` every ``eval_steps`` steps and at the end.

Each evaluation writes ``<output_dir>/eval/step-000010.json`` (the ``rlvr eval`` format, with its
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

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingEval:
    """What to evaluate during training, and when (built once from the eval options at start-up)."""

    datasets: tuple[str, ...]
    every: int  # eval_steps (0: never)
    max_steps: int  # the last step is always evaluated
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

    def due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.max_steps)

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
