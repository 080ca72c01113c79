"""Prompts over the length budget, at set-up: refused (``truncation=error``), left out (``drop``) or cut from
the left (``left``) (the step's metric of it: ``metrics.truncation_metrics``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rlvr.train.setup import check_training_lengths

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LengthLimits:
    rows: list[dict]  # the rows trained on (drop: those within the budget)
    truncation: str  # error | drop | left
    prompts_dropped: int  # drop: rows left out


def apply_length_limits(rows: list[dict], *, truncation: str, max_prompt_length: int | None, source: str,
                        max_completion_length: int, prompt_format, policy, tokenizer, engine,
                        prompts) -> LengthLimits:
    """Check every prompt against the budget (max_prompt_length, or the model's positions less the response's);
    ``prompts`` (a PromptBuilder) is told to cut from the left under ``truncation=left``."""
    check = check_training_lengths(
        rows, source=source, max_completion_length=max_completion_length, max_prompt_length=max_prompt_length,
        prompt_format=prompt_format, policy=policy, tokenizer=tokenizer, engine=engine, tokenize=prompts.variants,
        refuse=truncation == "error")
    dropped = len(check.too_long) if truncation == "drop" else 0
    if truncation == "drop" and check.too_long:
        over = set(check.too_long)
        rows = [row for i, row in enumerate(rows) if i not in over]
        if not rows:
            raise ValueError(f"truncation=drop left no rows of {source}: every prompt is over "
                             f"{check.budget} tokens; raise max_prompt_length or use truncation=left")
        logger.warning("truncation=drop: %d of %d prompts of %s are over %d tokens and are left out "
                       "(data/prompts_dropped)", len(over), len(over) + len(rows), source, check.budget)
    if truncation == "left" and check.budget is not None:
        prompts.truncate_to(check.budget)
        if check.too_long:
            logger.warning("truncation=left: %d prompts of %s are over %d tokens and keep their last %d "
                           "(rollout/prompt_truncated_frac)", len(check.too_long), source, check.budget, check.budget)
    return LengthLimits(rows, truncation, dropped)
