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

from rlvr.eval.runner import evaluate, load_eval_datasets

logger = logging.getLogger(__name__)


def should_evaluate(cfg, step: int) -> bool:
    every = cfg.eval.eval_steps
    return bool(every) and (step % every == 0 or step == cfg.run.max_steps)


def evaluate_during_training(trainer, step: int) -> dict[str, float]:
    """Run the configured evaluation on the current policy; return eval/ metrics."""
    cfg, e = trainer.cfg, trainer.cfg.eval
    t0 = time.perf_counter()
    result = evaluate(
        trainer.policy, trainer.tokenizer, list(e.eval_data),
        n=e.eval_n, ks=list(e.eval_k), temperature=e.eval_temperature, top_p=e.eval_top_p,
        max_completion_length=e.eval_max_completion_length or cfg.rollout.max_completion_length,
        out_path=trainer.output_dir / "eval" / f"step-{step:06d}.json",
        instruction=cfg.data.instruction, system_prompt=cfg.data.system_prompt,
        answer_extraction=cfg.reward.answer_extraction, seed=cfg.run.seed, limit=e.eval_limit,
        progress=False, model_name=f"{cfg.model.model} (step {step})",
    )
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
