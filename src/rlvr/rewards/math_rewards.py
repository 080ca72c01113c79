"""Built-in math reward functions with TRL's signature ``fn(prompts, completions, **columns)``.

``completions`` are strings or chat messages (``[{"role": "assistant", "content": ...}]``); both
are accepted. Rewards are floats in {0.0, 1.0}; a completion without an answer scores 0.0, not
None, because "wrote no answer" is a wrong answer, not "not applicable".

Golds that are not math are not rejected at load time (rows are checked for a non-empty gold,
not for math syntax, since golds may be words): prose golds (``No``, ``Exactly one``) and golds
that do not parse as a whole (``\\frac{``, ``floor(n/2)``) are compared as normalised text
(``rlvr.rewards.answer_kind``) and counted in ``text_compared``; the second sort also in
``gold_unparsed`` (``rewards/accuracy/gold_unparsed``: a counter that keeps rising means a broken
or unsupported gold column). ``VerifierPool.gold_kinds`` tells them apart before a run.

Reward hacking (open-instruct #659): ``format_reward`` is additive and pays wrong answers too;
weight it well below accuracy (e.g. 0.1) or the policy learns to box anything.
"""

from __future__ import annotations

import re

from rlvr.rewards.answer_kind import TEXT, UNPARSED
from rlvr.rewards.extract import DEFAULT_EXTRACTION, EXTRACTION_MODES, extract_answer, find_last_box
from rlvr.rewards.verify import UNEVALUATED, VerifierPool

FORMAT_MAX_TAIL_CHARS = 20

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)[ \t\n]*\{")
_STAT_KEYS = ("calls", "correct", "no_answer", "timeouts", "verifier_errors", "gold_unparsed", "text_compared",
              "unevaluated")


def completion_text(completion) -> str:
    """The text of one completion: a string as is, or the content of the last chat message.

    Content given as a list of parts (``[{"type": "text", "text": ...}]``) is joined.
    """
    if isinstance(completion, str):
        return completion
    message = completion[-1] if isinstance(completion, (list, tuple)) and completion else completion
    if isinstance(message, dict) and "content" in message:
        content = message["content"]
        if isinstance(content, str):
            return content
        if isinstance(content, (list, tuple)):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is None:
            return ""
    raise TypeError(f"a completion must be a str or a list of {{'role', 'content'}} messages, got "
                    f"{type(completion).__name__}: {str(completion)[:80]!r}")


class MathAccuracy:
    """1.0 if the completion's final answer is mathematically equal to the gold, else 0.0.

    Reads the gold from the ``answer`` column (one per completion), extracts the prediction with
    ``extract_answer`` and verifies it in ``pool``. Counters since the last ``pop_stats()``:
    ``calls`` (completions scored), ``correct``, ``no_answer`` (nothing extracted),
    ``timeouts`` and ``verifier_errors`` (verifier timed out / failed; both scored 0.0),
    ``text_compared`` (completions with an answer whose gold was compared as normalised text, not
    by math-verify: a prose gold such as ``No``, or an unparsed one), ``gold_unparsed`` (the part of
    ``text_compared`` whose gold looks like math but does not parse as a whole, ``\\frac{`` or
    ``floor(n/2)``: a data problem, whatever the score), ``unevaluated`` (a numeric gold answered with an expression such as ``84 - 12``; scored 0.0,
    see ``rlvr.rewards.verify``: a policy that learns to restate the question shows here).

    Args:
        pool: the ``VerifierPool`` that runs math-verify.
        answer_extraction: ``boxed`` or ``flexible`` (also the last number), see ``extract_answer``.

    ``is_correctness``: this reward's 1.0 means "correct" (DaGRPO's anchor trigger and the
    ``rollout/`` correctness fractions read it); any reward function may declare the same.
    """

    is_correctness = True
    reads_gold = True  # rlvr's gold as ``answer`` whatever the dataset's columns (rlvr.rewards.reward_function)

    def __init__(self, pool: VerifierPool, answer_extraction: str = DEFAULT_EXTRACTION):
        if not hasattr(pool, "verify_batch"):
            raise TypeError(f"MathAccuracy needs a VerifierPool, got {type(pool).__name__}; "
                            "create one with rlvr.rewards.VerifierPool()")
        if answer_extraction not in EXTRACTION_MODES:
            raise ValueError(f"answer_extraction must be one of {EXTRACTION_MODES}, "
                             f"got {answer_extraction!r}")
        self.pool = pool
        self.answer_extraction = answer_extraction
        self.__name__ = "accuracy"  # TRL and combine_rewards name the reward by __name__
        self._stats = dict.fromkeys(_STAT_KEYS, 0)

    def __call__(self, prompts, completions, answer=None, **columns) -> list[float]:
        if answer is None:
            raise ValueError("the accuracy reward needs the gold answers in an `answer` column; "
                             "map your dataset's gold field (e.g. `solution`) to `answer`")
        if len(answer) != len(completions):
            raise ValueError(f"got {len(completions)} completions but {len(answer)} answers; "
                             "repeat each gold answer once per generated completion")
        preds = [extract_answer(completion_text(c), self.answer_extraction) for c in completions]
        results = self.pool.verify_batch(list(answer), preds)
        self._stats["calls"] += len(results)
        self._stats["correct"] += sum(r.correct for r in results)
        self._stats["no_answer"] += sum(p is None for p in preds)
        self._stats["timeouts"] += sum(r.timed_out for r in results)
        self._stats["verifier_errors"] += sum(r.error not in (None, UNEVALUATED) for r in results)
        self._stats["gold_unparsed"] += sum(r.gold_kind == UNPARSED for r in results)
        self._stats["text_compared"] += sum(r.gold_kind in (TEXT, UNPARSED) for r in results)
        self._stats["unevaluated"] += sum(r.error == UNEVALUATED for r in results)
        return [1.0 if r.correct else 0.0 for r in results]

    @property
    def stats(self) -> dict[str, int]:
        """Counters since the last reset (a copy)."""
        return dict(self._stats)

    def pop_stats(self) -> dict[str, int]:
        """The counters, named for logging (``accuracy/timeouts``, ...), reset to zero after.

        Namespaced so they sit beside ``combine_rewards``' ``accuracy/errors`` (failed calls of the
        function itself, read by the failure policy) without clashing: hence ``verifier_errors``.
        """
        stats, self._stats = self._stats, dict.fromkeys(_STAT_KEYS, 0)
        return {f"{self.__name__}/{key}": value for key, value in stats.items()}


def format_reward(prompts, completions, **columns) -> list[float]:
    """1.0 if the completion has exactly one balanced ``\\boxed{}`` and little after it, else 0.0.

    "Little": at most ``FORMAT_MAX_TAIL_CHARS`` non-space characters follow the closing brace
    (room for ``$.`` or ``\\]``, not for a second attempt). ``\\fbox{}`` counts as a box.
    """
    return [1.0 if _is_well_formatted(completion_text(c)) else 0.0 for c in completions]


format_reward.__name__ = "format"  # the registry name, so logs read rewards/format


def _is_well_formatted(text: str) -> bool:
    span = find_last_box(text)
    if span is None:
        return False
    boxes = _BOX_OPEN.finditer(text)
    if next(boxes, None) is None or next(boxes, None) is not None:
        return False
    return len(text[span[1] + 1:].strip()) <= FORMAT_MAX_TAIL_CHARS
