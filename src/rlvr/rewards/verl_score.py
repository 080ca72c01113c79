"""verl's reward contract as an rlvr reward function: ``compute_score`` called once per response.

verl's reward managers call, for every response,

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...) -> float | {"score": float, ...}

with ``ground_truth = row["reward_model"]["ground_truth"]``, ``data_source = row["data_source"]``
and ``extra_info = row.get("extra_info")``. :class:`VerlScore` does the same from the columns a
reward function receives (``rlvr.rewards.reward_function``): rows without ``reward_model`` give
rlvr's gold (``answer``), rows without ``data_source``/``extra_info`` give None. ``solution_str``
is the completion's text (a chat completion's message content). A dict's other numeric keys are
logged through ``log_metric`` as ``<name>/<key>`` (mean over the batch; metrics.jsonl
``reward_fn/<name>/<key>``).

Convention: a response whose ``compute_score`` raises (or returns no number) is None for that
response and counted in ``rewards/<name>/response_errors``, with the first exception of the batch
logged; when every response of the batch fails the call fails as a whole (the exception is
re-raised, ``rewards/<name>/errors``, and the failure policy of ``rlvr.train.rewarding`` applies).
"""

from __future__ import annotations

import inspect
import logging
import numbers
from collections.abc import Callable

from rlvr.rewards.math_rewards import completion_text

logger = logging.getLogger(__name__)

VERL_PARAMETERS = ("solution_str", "ground_truth")  # what tells a verl compute_score by its signature


def is_verl_compute_score(fn: Callable) -> bool:
    """True when ``fn`` takes ``solution_str`` and ``ground_truth`` by name and no ``completions``
    (a TRL-signature function takes ``completions``)."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return all(name in parameters for name in VERL_PARAMETERS) and "completions" not in parameters


class VerlScore:
    """A verl ``compute_score`` with rlvr's reward signature (see the module docstring)."""

    reads_gold = True  # ``answer``: the ground truth of a row without reward_model.ground_truth

    def __init__(self, compute_score: Callable):
        if not callable(compute_score):
            raise TypeError(f"a verl compute_score must be callable, got {type(compute_score).__name__}")
        self.compute_score = compute_score
        self.__name__ = getattr(compute_score, "__name__", None) or type(compute_score).__name__
        self._response_errors = 0

    def __call__(self, prompts, completions, answer=None, reward_model=None, data_source=None, extra_info=None,
                 log_metric=None, **columns) -> list[float | None]:
        n = len(completions)
        reward_model, data_source, extra_info = ([None] * n if c is None else c
                                                 for c in (reward_model, data_source, extra_info))
        answer = [None] * n if answer is None else answer
        scores, extras, first_error = [], {}, None
        for i, completion in enumerate(completions):
            rm = reward_model[i]
            ground_truth = rm["ground_truth"] if isinstance(rm, dict) and "ground_truth" in rm else answer[i]
            try:
                result = self.compute_score(data_source=data_source[i], solution_str=completion_text(completion),
                                            ground_truth=ground_truth, extra_info=extra_info[i])
                scores.append(self._score(result, extras))
            except Exception as exc:  # noqa: BLE001  (user code on model output: counted, never fatal here)
                first_error = first_error or exc
                scores.append(None)
        failed = sum(score is None for score in scores) if first_error is not None else 0
        if first_error is not None and failed == n:
            raise first_error  # the call fails as a whole: counted in <name>/errors by combine_rewards
        if first_error is not None:
            self._response_errors += failed
            logger.warning("verl compute_score %r failed on %d of %d responses (their values are None)",
                           self.__name__, failed, n, exc_info=first_error)
        if log_metric is not None:
            for key, values in extras.items():
                log_metric(f"{self.__name__}/{key}", sum(values) / len(values))
        return scores

    @staticmethod
    def _score(result, extras: dict[str, list[float]]) -> float:
        """The score of one verl result (a number, or a dict with ``score``); the dict's other numbers into ``extras``."""
        if isinstance(result, dict):
            if "score" not in result:
                raise ValueError(f"compute_score returned a dict without a 'score' key (keys: {sorted(result)}); "
                                 "return a float or {'score': float, ...}")
            for key, value in result.items():
                if key != "score" and isinstance(value, numbers.Real):  # verl's math_dapo: acc is a bool
                    extras.setdefault(key, []).append(float(value))
            result = result["score"]
        if not isinstance(result, numbers.Real):
            raise TypeError(f"compute_score returned a {type(result).__name__} ({str(result)[:80]!r}), not a number")
        return float(result)

    def pop_stats(self) -> dict[str, float]:
        """``<name>/response_errors`` since the last call (logged as ``rewards/<name>/response_errors``)."""
        errors, self._response_errors = self._response_errors, 0
        return {f"{self.__name__}/response_errors": errors}
