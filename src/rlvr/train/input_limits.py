"""The training run's start-up length check: the config's limits applied to ``rlvr.data.input_limits``.

Called once the policy and the rollout engine exist (the engine may have a limit of its own: vLLM's
``max_model_len``) and before anything is generated, so ``max_completion_length=100000000`` or a
3,000-token prompt on a 1,024-position model stops the run at start-up, naming the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlvr.data.input_limits import LengthCheck, check_lengths
from rlvr.data.prompts import PromptFormat
from rlvr.models.loading import position_limit


def check_training_lengths(
    rows: Sequence[dict],
    *,
    source: str,
    max_completion_length: int,
    max_prompt_length: int | None,
    prompt_format: PromptFormat,
    policy,
    tokenizer,
    engine,
    tokenize: Callable[[dict], Sequence[Sequence[int]]],
    refuse: bool = True,
) -> LengthCheck:
    """``check_lengths`` with the run's limits; ``tokenize``: row → the prompt ids of every variant."""
    return check_lengths(
        rows, tokenize, source=source, refuse=refuse,
        max_positions=position_limit(policy, tokenizer, engine=engine),
        max_completion_length=max_completion_length, max_prompt_length=max_prompt_length,
        template_bytes=prompt_format.template_bytes(tokenizer),
    )
