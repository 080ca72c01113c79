"""Scorers by name: ``build_scorer(name, **options)``, one factory per name in ``SCORERS``."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.rewards.scorers.base import Scorer
from rlvr.rewards.scorers.embed import EmbedScorer
from rlvr.rewards.scorers.judge import CACHE_SIZE, MAX_CHARS, Judge, JudgeBackend
from rlvr.rewards.scorers.judge_backends import LocalModelBackend, OpenAIChatBackend
from rlvr.rewards.scorers.steps import RewardScorer, StepsScorer

JUDGE_BACKENDS: dict[str, Callable[..., JudgeBackend]] = {
    "openai": OpenAIChatBackend,
    "local": LocalModelBackend,
}


def build_judge(backend: str | JudgeBackend = "openai", *, max_chars: int = MAX_CHARS,
                cache_size: int = CACHE_SIZE, **backend_options) -> Judge:
    """A ``Judge`` over a backend object, or over ``JUDGE_BACKENDS[backend](**backend_options)``.

    ``build_judge("openai", base_url=..., model=...)``; ``build_judge("local", model=lm,
    tokenizer=tok)`` with an already-loaded transformers model.
    """
    if isinstance(backend, str):
        if backend not in JUDGE_BACKENDS:
            raise ValueError(f"unknown judge backend {backend!r}; choose one of {sorted(JUDGE_BACKENDS)}")
        backend = JUDGE_BACKENDS[backend](**backend_options)
    elif backend_options:
        raise ValueError(f"options {sorted(backend_options)} are for a backend built by name; "
                         "pass them to the backend object you built instead")
    return Judge(backend, max_chars=max_chars, cache_size=cache_size)


# name -> factory(**options)
SCORERS: dict[str, Callable[..., Scorer]] = {
    "reward": RewardScorer,
    "steps": StepsScorer,
    "embed": EmbedScorer,
    "judge": build_judge,
}


def build_scorer(name: str, **options) -> Scorer:
    """The scorer registered as ``name``, built with ``options`` (see each factory's Args)."""
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; choose one of {sorted(SCORERS)}")
    return SCORERS[name](**options)
