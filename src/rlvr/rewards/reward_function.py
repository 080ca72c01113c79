"""The contract of a reward function: TRL's, so TRL reward functions run here unchanged.

    fn(prompts, completions, completion_ids, **columns, trainer_state, log_extra, log_metric)
        -> list[float | None]                                     one value per completion

``prompts``/``completions`` are strings, or chat message lists for conversational data (a
completion is then ``[{"role": "assistant", "content": text}]``); ``completion_ids`` are the
completions' token ids; every dataset column comes as a keyword list aligned with them (``answer``,
``solution``, ...); ``trainer_state`` is a ``transformers.TrainerState`` (``global_step``,
``max_steps``, ``epoch``); ``log_extra(column, values)`` adds a column to the completions in
samples.jsonl, ``log_metric(name, value)`` a metric (``reward_fn/<name>`` in metrics.jsonl, the
mean over the step's calls). These are TRL GRPOTrainer's keyword arguments, so a function takes
the ones it needs and ``**kwargs`` for the rest; ``async def`` functions are awaited (concurrently,
``rlvr.rewards.combine``). None means "not applicable"
(left out of the weighted sum; when every function gives None the completion is unrewarded and
gets advantage 0). A function is logged under its ``__name__``.

Optional members rlvr reads when present:

- ``pop_stats() -> dict[str, float]``: counters since the last call, logged as ``rewards/<key>``;
- ``is_correctness = True``: this function's 1.0 means "correct" (DaGRPO's anchor trigger and the
  ``rollout/`` correctness fractions use it; the built-in ``accuracy`` declares it);
- ``reads_gold = True``: the function gets rlvr's gold answer of each row as ``answer`` (the row's
  normalised gold, ``rlvr.data.rows``), whether or not the dataset has an ``answer`` column (a TRL config
  passes the dataset's columns as they are; the built-in ``accuracy`` and verl's scores declare it).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class RewardFunction(Protocol):
    def __call__(self, prompts: list, completions: list, **columns: list) -> list[float | None]: ...
