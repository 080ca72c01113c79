"""The contract every rollout engine keeps: what the trainer calls, and what it may ask of the class.

The built-in engines (``ROLLOUT_ENGINES``: rlvr's decode engine, transformers' ``generate``, vLLM)
satisfy it; a new engine (a vLLM server client, say) is a class with these members, registered
in ``rlvr.rollout.names`` (docs/design/architecture.md, "Add a rollout engine"). What an engine can do
is said by its class attributes (the abilities below), which the plan reads (``train/plan.py``): no code
outside ``rollout/`` compares an engine's name.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates responses from the policy's current weights.

    Construction: ``Engine(model, *, pad_token_id, eos_token_ids)``.
    """

    eos_token_ids: list[int]  # a response ends at the first of these (kept in the response)

    # abilities, class attributes read by the plan
    supports_row_seeds: bool  # generate(row_seeds=...) gives each request its own RNG stream
    keeps_own_weights: bool  # holds its own copy of the weights (sync_weights copies the policy's into it)
    supports_async_generation: bool  # may generate the next step while the update moves the policy's weights
    is_correction_by_default: bool  # samples with other numerics than the trainer: the sampler/trainer
    #                                  importance-sampling correction is on unless the config turns it off
    supports_sleep: bool  # can release its memory between rollouts (vllm_enable_sleep_mode)
    optional_package: tuple[str, str] | None  # (package, install hint) it needs, checked before the model loads

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        sampling: Sampling,
        generator_seed: int | None = None,
        row_seeds: list[int] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in prompt order (a group repeats its prompt G times).

        ``sampling``: temperature (0: greedy), top_p, top_k, min_p, repetition_penalty
        (:class:`~rlvr.rollout.sampling.Sampling`, whose docstring gives the order they apply in).
        ``row_seeds`` (one per prompt, with ``supports_row_seeds``): request r samples with its own
        seed, so its response does not depend on what else is in the batch; else ``generator_seed``
        seeds the engine's RNG once. Each completion carries its tokens, the sampler's log-probs
        and whether it hit ``max_new_tokens``.

        Convention: a token's sampling log-prob is log softmax(logits / T)[x], the policy's own, not
        the warped distribution's (an engine that cannot, as vLLM, says so in its docstring).
        """
        ...

    def sync_weights(self) -> None:
        """Take the policy's weights after an update or a resume (no-op when sampling from them directly)."""
        ...
