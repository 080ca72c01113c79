"""What every scorer shares: the call signature, input checks and resettable counters.

A scorer maps a batch to one fine-grained quality score per response:

    scorer(questions, responses, references, rewards) -> list[float | None]

q ∈ [0, 1], or None where scoring failed; the trainer then falls back to s = r for that response
and counts it (docs/algorithms/dagrpo.md, step 1 of the algorithm). Scorers never raise on model output.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rlvr.rewards.math_rewards import completion_text


@runtime_checkable
class Scorer(Protocol):
    """A fine-grained scorer: ``name``, ``__call__`` as above, and ``pop_stats()``."""

    name: str

    def __call__(
        self,
        questions: Sequence[str],
        responses: Sequence[str],
        references: Sequence[str | None],
        rewards: Sequence[float],
    ) -> list[float | None]: ...

    def pop_stats(self) -> dict[str, float]: ...


def check_batch(questions, responses, references, rewards) -> list[str]:
    """Raise ValueError unless the four lists have one entry per response; the response texts.

    Responses may be strings or chat messages (``completion_text`` takes the last message).
    """
    lengths = {"questions": len(questions), "responses": len(responses),
               "references": len(references), "rewards": len(rewards)}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"a scorer needs one question, reference and reward per response, got "
                         f"{lengths}; repeat each prompt's question and reference once per sample")
    return [completion_text(r) for r in responses]


def reward_as_score(reward) -> float | None:
    """The reward as a score: clamped to [0, 1]; None if it is not a finite number."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value):
        return None
    return min(1.0, max(0.0, value))


class Counters:
    """Named counters plus wall time, returned and reset by ``pop``.

    ``calls`` counts responses scored and ``failures`` the ``None`` scores returned; every scorer
    has both, so the trainer can log fallbacks uniformly. Thread-safe (backends count from
    worker threads).
    """

    def __init__(self, *keys: str):
        self._keys = ("calls", "failures", "seconds", *keys)
        self._values = dict.fromkeys(self._keys, 0.0)
        self._lock = threading.Lock()

    def __getstate__(self):  # a lock cannot be pickled or deep-copied; a fresh one is equivalent
        return {"_keys": self._keys, "_values": dict(self._values)}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def add(self, key: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[key] += amount

    def timed(self) -> _Timer:
        """Context manager adding the elapsed wall time to ``seconds``."""
        return _Timer(self)

    def record(self, scores: list[float | None]) -> list[float | None]:
        """Count a finished batch (``calls``, ``failures``) and pass the scores through."""
        self.add("calls", len(scores))
        self.add("failures", sum(s is None for s in scores))
        return scores

    def pop(self) -> dict[str, float]:
        with self._lock:
            values, self._values = self._values, dict.fromkeys(self._keys, 0.0)
        return values


class _Timer:
    def __init__(self, counters: Counters):
        self._counters = counters

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._counters.add("seconds", time.perf_counter() - self._start)
        return False
