"""The ``reward`` and ``steps`` scorers: cheap, offline, deterministic.

``steps`` is OUR offline stand-in for the paper's LLM judge of reasoning quality (a deviation,
[design] in docs/algorithms/dagrpo.md): it checks the arithmetic the response writes down, not its logic.

    q_steps = (# equations that hold) / (# equations checked)     (see ``find_equations``)
    q       = q_steps   if the response has at least one checkable equation
            = clamp(r)  otherwise (nothing to check: the score adds no information)

The trainer combines q with the reward via α (s = α·r + (1−α)·q), so a correct answer reached
with a wrong step scores below a clean one, and a wrong answer whose steps are all right scores
above one with broken arithmetic.
"""

from __future__ import annotations

from rlvr.rewards.scorers.base import Counters, check_batch, reward_as_score
from rlvr.rewards.scorers.equations import MAX_EQUATIONS, find_equations


class RewardScorer:
    """q = r, clamped to [0, 1] (None for a non-finite reward): SGR on the reward alone."""

    name = "reward"

    def __init__(self):
        self._counters = Counters()

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        check_batch(questions, responses, references, rewards)
        return self._counters.record([reward_as_score(r) for r in rewards])

    def pop_stats(self) -> dict[str, float]:
        """``calls``, ``failures`` (non-finite rewards), ``seconds``; reset after."""
        return self._counters.pop()


class StepsScorer:
    """Fraction of the response's written equations that hold (exact rational arithmetic); q = r
    when it has none.

    Offline stand-in for the paper's LLM judge (our deviation): see the module docstring for the
    formula and ``rlvr.rewards.scorers.equations`` for what counts as an equation.

    Args:
        decimal_rounding: a bare decimal side with d places also matches a value within half a
            unit in its last place (``10/3 = 3.33`` holds).
        max_equations: equations checked per response at most (the first ones).

    Stats (``pop_stats``): ``calls``, ``failures`` (internal errors; the score is None),
    ``seconds``, ``equations`` (checked), ``equations_true``, ``no_equations`` (responses that
    fell back to q = r).
    """

    name = "steps"

    def __init__(self, *, decimal_rounding: bool = True, max_equations: int = MAX_EQUATIONS):
        if isinstance(max_equations, bool) or not isinstance(max_equations, int) or max_equations < 1:
            raise ValueError(f"max_equations must be an int >= 1, got {max_equations!r}")
        self.decimal_rounding = bool(decimal_rounding)
        self.max_equations = max_equations
        self._counters = Counters("equations", "equations_true", "no_equations")

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        texts = check_batch(questions, responses, references, rewards)
        with self._counters.timed():
            scores = [self._score(text, reward) for text, reward in zip(texts, rewards)]
        return self._counters.record(scores)

    def _score(self, text: str, reward: float) -> float | None:
        try:
            equations = find_equations(text, decimal_rounding=self.decimal_rounding,
                                       max_equations=self.max_equations)
        except Exception:  # noqa: BLE001 -- a parser bug must not stop training; counted
            return None
        if not equations:
            self._counters.add("no_equations")
            return reward_as_score(reward)
        true = sum(e.holds for e in equations)
        self._counters.add("equations", len(equations))
        self._counters.add("equations_true", true)
        return true / len(equations)

    def pop_stats(self) -> dict[str, float]:
        """The counters above, reset after."""
        return self._counters.pop()
