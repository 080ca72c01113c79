"""open-r1's math and text rewards, written anew, so that its recipes' ``reward_funcs`` run in rlvr.

Reproduces huggingface/open-r1 ``src/open_r1/rewards.py`` at commit 1416fa0 (open-r1 is not on
PyPI, so it cannot be imported): ``accuracy_reward``, ``format_reward``, ``tag_count_reward``,
``reasoning_steps_reward``, ``len_reward``, ``get_cosine_scaled_reward``,
``get_repetition_penalty_reward`` and ``get_soft_overlong_punishment``: the same math_verify calls
and configurations, the same regexes and formulas, and for the parameterised ones the defaults of
open-r1's ``GRPOScriptArguments`` (``src/open_r1/configs.py``), which is what a recipe's
``cosine`` or ``repetition_penalty`` means. ``OPEN_R1_REWARDS`` maps the names of open-r1's
registry (``get_reward_funcs``) to them; each has open-r1's ``__name__`` (``accuracy_reward``,
``cosine_scaled_reward``, ...), so its metrics carry the names open-r1's carry under TRL.

Where this departs from open-r1 (the values are otherwise the same):

- a completion may also be a plain string, scored as it is; open-r1 reads only the first
  message's content of a conversational completion (``completion[0]["content"]``);
- math_verify failing on a completion gives None for that completion in every function (open-r1
  does so only in ``accuracy_reward``; ``len_reward`` and ``cosine_scaled_reward`` raise there);
- math_verify's timeouts use ``signal.alarm``, which only the main thread may set: called from
  another thread (rlvr's ``reward_timeout`` runs a reward in one) they are off and rlvr's timeout
  bounds the call, as TRL's own ``accuracy_reward`` does (open-r1 raises there);
- the repetition penalty splits English words only (open-r1 also has ``language="zh"``, jieba);
- an empty batch scores ``[]`` in ``len_reward`` (open-r1 raises on ``min([])``);
- golds that do not parse are logged once per call, not printed once per completion.

open-r1's code rewards ``code``, ``binary_code`` and ``code_format`` are ``rlvr.rewards.code_rewards``'
(run in rlvr's own sandbox; the registry builds them); ``ioi_code`` and ``cf_code`` need the IOI and
Codeforces graders of open-r1's Piston service, which rlvr does not have: ``open_r1_reward`` refuses them.
math_verify is imported on first use, so that ``import rlvr.config`` stays light.

Convention: a gold that does not parse scores None in ``accuracy_reward`` (not applicable), 1.0
in ``cosine_scaled_reward`` and counts as correct in ``len_reward``: open-r1's choices, kept.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from rlvr.rewards.math_rewards import completion_text

logger = logging.getLogger(__name__)

MATH_VERIFY_TIMEOUT_S = 5  # math_verify's default for parse and verify, which open-r1 leaves as it is
# MULTILINE as in open-r1: `$` also matches before a newline, so text after </answer>'s line passes
FORMAT_PATTERN = re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.DOTALL | re.MULTILINE)
# no MULTILINE, as in open-r1: `^\d+\.` counts a numbered line only at the very start of the text
STEP_PATTERN = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")
STEPS_FOR_FULL_REWARD = 3
TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")  # each worth 0.25 when it occurs once
OPEN_R1_CODE_REWARDS = ("code", "binary_code", "code_format")  # rlvr.rewards.code_rewards, in rlvr's sandbox
OPEN_R1_GRADER_REWARDS = ("ioi_code", "cf_code")  # open-r1's Piston graders: not available


def completion_content(completion) -> str:
    """The text open-r1 scores: the first message's content, or a plain-string completion itself."""
    if isinstance(completion, (list, tuple)) and completion:
        return completion_text(completion[:1])
    return completion_text(completion)


def _timeout_s() -> int | None:
    """math_verify's timeout here: its default in the main thread, None (off) in any other.

    Its timeouts set ``signal.alarm``, which raises ValueError outside the main thread.
    """
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _parse_gold(solution, *, latex_only: bool) -> list:
    """open-r1's gold: the first match, with math_verify's default targets (LaTeX, then plain
    expressions) in ``accuracy_reward``, LaTeX only in ``len_reward`` and the cosine reward."""
    from math_verify import LatexExtractionConfig, parse

    if latex_only:
        return parse(solution, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()],
                     parsing_timeout=_timeout_s())
    return parse(solution, extraction_mode="first_match", parsing_timeout=_timeout_s())


def _parse_answer(content: str, *, boxed) -> list:
    """open-r1's answer: the first LaTeX match, ``\\boxed{}`` tried first, no match without an anchor.

    ``boxed`` is ``"all"`` in ``accuracy_reward`` and ``True`` in the length rewards, as open-r1
    passes them (latex2sympy2_extended reads ``True`` as no boxed unwrapping in normalisation).
    """
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse

    _drop_equations_notice()
    normalization = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, equations=True,
                                        boxed=boxed, units=True)
    config = LatexExtractionConfig(normalization_config=normalization, boxed_match_priority=0,
                                   try_extract_without_anchor=False)
    try:
        return parse(content, extraction_config=[config], extraction_mode="first_match", parsing_timeout=_timeout_s())
    except Exception:  # a model's output must not stop the run; parse's own failures give []
        logger.debug("math_verify could not parse a completion", exc_info=True)
        return []


@functools.cache
def _drop_equations_notice() -> None:
    """Silence latex2sympy2_extended's "equations=True ... is deprecated" warning, once for the process.

    open-r1's ``equations=True`` still splits equations (kept for the same values), and the library
    warns at every completion parsed: one line per completion per step, with nothing to act on.
    """
    logging.getLogger("latex2sympy2_extended.math_normalization").addFilter(
        lambda record: not record.getMessage().startswith("equations=True in NormalizationConfig is deprecated"))


def _verify(first: list, second: list) -> bool | None:
    """``math_verify.verify(first, second)``, or None when it raises."""
    from math_verify import verify

    try:
        return bool(verify(first, second, timeout_seconds=_timeout_s()))
    except Exception:  # open-r1: a failed verify skips the completion
        logger.debug("math_verify could not verify a completion", exc_info=True)
        return None


def _solutions(solution, completions, reward: str) -> list:
    """The ``solution`` column, checked: one gold per completion."""
    if solution is None:
        raise ValueError(f"open-r1's {reward} reads the gold from a `solution` column, which this dataset lacks; "
                         "add one, or use rlvr's accuracy (`rlvr:accuracy`, which reads `answer`)")
    if len(solution) != len(completions):
        raise ValueError(f"{reward} got {len(completions)} completions but {len(solution)} solutions; "
                         "repeat each solution once per generated completion")
    return list(solution)


def _warn_unparsed(reward: str, unparsed: list, total: int) -> None:
    if unparsed:
        logger.warning("%s: %d of %d golds in `solution` do not parse (e.g. %r)", reward, len(unparsed), total,
                       str(unparsed[0])[:80])


def accuracy_reward(completions, solution=None, **kwargs) -> list[float | None]:
    """1.0 if the completion's first LaTeX answer equals the ``solution`` column's gold, else 0.0.

        reward = float(verify(parse(solution), parse(completion)))     (open-r1's argument order)

    Convention: None (left out of the sum) when the gold does not parse or verify raises, as in
    open-r1. Plain-string completions are accepted too (open-r1: conversational only).
    """
    golds = _solutions(solution, completions, "accuracy_reward")
    rewards: list[float | None] = []
    unparsed = []
    for completion, sol in zip(completions, golds):
        gold = _parse_gold(sol, latex_only=False)
        if not gold:
            unparsed.append(sol)
            rewards.append(None)
            continue
        correct = _verify(gold, _parse_answer(completion_content(completion), boxed="all"))
        rewards.append(None if correct is None else float(correct))
    _warn_unparsed("accuracy_reward", unparsed, len(golds))
    return rewards


accuracy_reward.is_correctness = True  # its 1.0 means "correct" (rlvr.rewards.reward_function)
accuracy_reward.required_columns = ("solution",)  # checked by `rlvr train --dry-run` before any model loads


def format_reward(completions, **kwargs) -> list[float]:
    """1.0 if the completion is ``<think>\\n…\\n</think>\\n<answer>\\n…\\n</answer>``, else 0.0.

    Convention: open-r1's regex and flags (DOTALL, MULTILINE: the ``$`` after ``</answer>`` may
    end any line). Plain-string completions are accepted too (open-r1: conversational only).
    """
    return [1.0 if FORMAT_PATTERN.match(completion_content(c)) else 0.0 for c in completions]


def tag_count_reward(completions, **kwargs) -> list[float]:
    """0.25 for each of ``<think>\\n``, ``\\n</think>\\n``, ``\\n<answer>\\n``, ``\\n</answer>`` that
    occurs exactly once in the completion (0.0 to 1.0). Plain strings accepted too (open-r1: chat only)."""
    return [_tag_score(completion_content(c)) for c in completions]


def _tag_score(text: str) -> float:
    score = 0.0
    for tag in TAGS:  # added one by one, as open-r1 does, so the float sums are the same
        if text.count(tag) == 1:
            score += 0.25
    return score


def reasoning_steps_reward(completions, **kwargs) -> list[float]:
    """min(1, k / 3) for k matches of step markers (``Step 1:``, ``\\n-``, ``\\n*``, ``First,``, …).

    Convention: open-r1's regex; ``^\\d+\\.`` matches only at the start of the text (no MULTILINE).
    Plain-string completions are accepted too (open-r1: conversational only).
    """
    counts = [len(STEP_PATTERN.findall(completion_content(c))) for c in completions]
    return [min(1.0, count / STEPS_FOR_FULL_REWARD) for count in counts]


def len_reward(completions, solution=None, **kwargs) -> list[float | None]:
    """Kimi 1.5's length reward (arXiv 2501.12599): shorter is better, and a wrong answer never gains.

        λ_i = 0.5 - (len_i - min_len) / (max_len - min_len)      len: characters of the completion
        r_i = λ_i if correct_i else min(0, λ_i);   every r_i = 0.0 when all lengths are equal

    Convention: min_len and max_len are over the whole call (every prompt's completions, as open-r1
    under TRL); a gold that does not parse counts as correct; correct_i is verify(answer, gold)
    (open-r1's order); None where verify raises. Plain strings accepted too (open-r1: chat only).
    """
    golds = _solutions(solution, completions, "len_reward")
    contents = [completion_content(c) for c in completions]
    lengths = [len(content) for content in contents]
    if not lengths or min(lengths) == max(lengths):
        return [0.0] * len(lengths)
    shortest, longest = min(lengths), max(lengths)
    correct = _length_correctness(contents, golds, "len_reward", unparsed_gold=True)
    rewards: list[float | None] = []
    for length, is_correct in zip(lengths, correct):
        lam = 0.5 - (length - shortest) / (longest - shortest)
        rewards.append(None if is_correct is None else float(lam if is_correct else min(0, lam)))
    return rewards


len_reward.required_columns = ("solution",)


def _length_correctness(contents: list[str], golds: list, reward: str, *, unparsed_gold) -> list:
    """Per completion: verify(answer, gold) as the length rewards check it, None where verify raises,
    ``unparsed_gold`` where the gold does not parse."""
    correct, unparsed = [], []
    for content, sol in zip(contents, golds):
        gold = _parse_gold(sol, latex_only=True)
        if not gold:
            unparsed.append(sol)
            correct.append(unparsed_gold)
            continue
        correct.append(_verify(_parse_answer(content, boxed=True), gold))
    _warn_unparsed(reward, unparsed, len(golds))
    return correct


_UNPARSED_GOLD = object()  # the cosine reward's marker: this gold did not parse (scored 1.0, as in open-r1)


@dataclass(frozen=True)
class CosineScaledReward:
    """open-r1's cosine length scaling (``get_cosine_scaled_reward``): short correct answers earn most.

        r = v_lo + 0.5 · (v_hi - v_lo) · (1 + cos(π · len / max_len))      len: characters
        (v_lo, v_hi) = (min_value_correct, max_value_correct) if correct,
                       (max_value_wrong, min_value_wrong) if wrong   (swapped, as in open-r1)

    Convention: the defaults are open-r1's ``GRPOScriptArguments`` (not its function's defaults,
    which differ in min_value_wrong = -1.0); len is not clipped at max_len (as in open-r1); a gold
    that does not parse scores 1.0, a verify that raises None. Plain strings accepted too.
    """

    required_columns = ("solution",)

    min_value_wrong: float = 0.0
    max_value_wrong: float = -0.5
    min_value_correct: float = 0.5
    max_value_correct: float = 1.0
    max_len: int = 1000
    __name__ = "cosine_scaled_reward"  # open-r1's inner function's name, which its metrics carry

    def __post_init__(self):
        if self.max_len <= 0:
            raise ValueError(f"CosineScaledReward.max_len must be positive, got {self.max_len}")

    def __call__(self, completions, solution=None, **kwargs) -> list[float | None]:
        golds = _solutions(solution, completions, self.__name__)
        contents = [completion_content(c) for c in completions]
        correct = _length_correctness(contents, golds, self.__name__, unparsed_gold=_UNPARSED_GOLD)
        return [self._score(len(content), ok) for content, ok in zip(contents, correct)]

    def _score(self, length: int, correct) -> float | None:
        if correct is _UNPARSED_GOLD:
            return 1.0
        if correct is None:
            return None
        cosine = math.cos(length / self.max_len * math.pi)
        lo, hi = ((self.min_value_correct, self.max_value_correct) if correct
                  else (self.max_value_wrong, self.min_value_wrong))
        return float(lo + 0.5 * (hi - lo) * (1.0 + cosine))


@dataclass(frozen=True)
class RepetitionPenaltyReward:
    """open-r1's n-gram repetition penalty (``get_repetition_penalty_reward``; arXiv 2502.03373, C.2).

        r = (1 - #distinct n-grams / #n-grams) · max_penalty      n-grams of lower-cased words

    Convention: words are the whitespace-split text (open-r1's ``language="en"``); an empty
    completion or one of fewer than ``ngram_size`` words scores 0.0. Plain strings accepted too.
    """

    ngram_size: int = 3
    max_penalty: float = -1.0
    __name__ = "repetition_penalty_reward"

    def __post_init__(self):
        if self.max_penalty > 0:
            raise ValueError(f"max_penalty {self.max_penalty} should not be positive; give a penalty <= 0")
        if self.ngram_size < 1:
            raise ValueError(f"ngram_size must be at least 1, got {self.ngram_size}")

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self._score(completion_content(c)) for c in completions]

    def _score(self, text: str) -> float:
        words = text.lower().split()
        if len(words) < self.ngram_size:  # also the empty completion
            return 0.0
        ngrams = list(zip(*(words[i:] for i in range(self.ngram_size))))
        return (1 - len(set(ngrams)) / len(ngrams)) * self.max_penalty


@dataclass(frozen=True)
class SoftOverlongPunishment:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13; open-r1's ``get_soft_overlong_punishment``).

        r = 0                          if L <= L_max - L_cache
            (L_max - L_cache - L) / L_cache   if L_max - L_cache < L <= L_max
            -1                         if L > L_max          L: the completion's token count

    Convention: the defaults are open-r1's ``GRPOScriptArguments`` (16384, 4096); L counts the
    ``completion_ids`` TRL and rlvr pass (tokens, though open-r1's help text says characters).
    """

    max_completion_len: int = 16384
    soft_punish_cache: int = 4096
    __name__ = "soft_overlong_punishment_reward"

    def __post_init__(self):
        if self.max_completion_len <= 0 or not 0 <= self.soft_punish_cache <= self.max_completion_len:
            raise ValueError(f"need max_completion_len > 0 and 0 <= soft_punish_cache <= max_completion_len, got "
                             f"{self.max_completion_len} and {self.soft_punish_cache}")

    def __call__(self, completion_ids=None, **kwargs) -> list[float]:
        if completion_ids is None or any(ids is None for ids in completion_ids):
            raise ValueError("soft_overlong_punishment_reward needs the completions' token ids (`completion_ids`); "
                             "the trainer passes them; called directly, pass completion_ids=[[id, ...], ...]")
        return [self._score(len(ids)) for ids in completion_ids]

    def _score(self, length: int) -> float:
        free = self.max_completion_len - self.soft_punish_cache
        if length <= free:
            return 0.0
        if length <= self.max_completion_len:
            return (free - length) / self.soft_punish_cache
        return -1.0


# open-r1's get_reward_funcs names -> the reward, built with GRPOScriptArguments' defaults
OPEN_R1_REWARDS: dict[str, Callable] = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "reasoning_steps": reasoning_steps_reward,
    "cosine": CosineScaledReward(),
    "repetition_penalty": RepetitionPenaltyReward(),
    "length": len_reward,
    "tag_count": tag_count_reward,
    "soft_overlong_punishment": SoftOverlongPunishment(),
}


def open_r1_reward(name: str) -> Callable:
    """open-r1's reward registered as ``name`` in its ``get_reward_funcs``.

    The code rewards (``OPEN_R1_CODE_REWARDS``) are built by ``rlvr.rewards.registry`` (they need the sandbox).

    Raises:
        ValueError: ``ioi_code``/``cf_code`` (they need open-r1's Piston graders), or an unknown name (lists the
            valid ones).
    """
    if name in OPEN_R1_GRADER_REWARDS:
        raise ValueError(f"open-r1's {name!r} reward grades with the IOI/Codeforces checkers of open-r1's Piston "
                         "service, which rlvr does not have; use `code` or `binary_code` (stdin/stdout tests run in "
                         "rlvr's sandbox), or pass your own function with reward_funcs=path/to/file.py:fn")
    if name not in OPEN_R1_REWARDS:
        raise ValueError(f"unknown open-r1 reward {name!r}; valid: {', '.join(OPEN_R1_REWARDS)}")
    return OPEN_R1_REWARDS[name]
