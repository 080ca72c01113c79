"""What counts as math and what as text in a final answer: the one place that decides it.

Used by the verifier worker for gold and prediction alike (``read_answer``, ``same_answer``) and by
the pool's fast path (``clean_answer``, rule 1, which lives with the extraction in
``rlvr.rewards.extract``: it is the last step of taking an answer out of a completion). Plain ``re`` at import time: math-verify (and sympy) are
imported only inside ``parse_whole``, which runs in the worker processes.

Rules, in the order they are applied to one answer (docs/training.md, "How answers are compared"):

1. Clean: math delimiters (``$``, ``\\(``, ``\\[``) and newlines go; ``\\dfrac``/``\\tfrac`` →
   ``\\frac``, ``\\varnothing`` → ``\\emptyset``; a trailing ``.``, ``,``, ``;`` or ``:`` goes (``\\boxed{2^{n-1}.}``), an ellipsis
   ``...`` stays; space-grouped thousands (``1 234``) are joined.
2. Unit: a trailing unit is split off — any word in ``\\text{}``/``\\mathrm{}``/``\\mbox{}``, or a bare
   word of ≥ 4 letters or a known unit abbreviation (``cm``, ``kg``, ...) after a digit or a closing
   bracket (``5 cm``, ``18 dollars``, ``5\\text{ cm}^2``). Never a negation or an English function
   word. Both answers with a unit and different units → wrong; otherwise the units are ignored.
3. Prose: an answer with a word is prose. A word is ≥ 2 letters outside a LaTeX command name and
   not a known function (``floor``, ``sin``, ``gcd``, ...), where a 2–3-letter word counts only if it
   is English (``no``, ``yes``, ``is``, ``the``; ``ab`` is a product of symbols); ``and``/``or``
   between maths are set commas, not words. A whole answer of letters only (``No``, ``Bob``) is prose.
4. Math core of prose: prose whose words are all neutral fillers (``the answer is``, ``is the only
   possible value``, ``the limit exists and is equal to``) around exactly one run of maths is read as
   that maths. A gold may give alternatives (``C(10, 5), or equivalently 252``): any one matches; a
   prediction with alternatives must match with every one (hedging never pays). A negation (``not``,
   ``no``, ``never``, ``none``, ...) is never a filler, so a negated sentence is always text.
5. Whole parse: each math string must parse with math-verify's LaTeX extractor *as a whole* (the
   whole ``$...$`` is its first match, no unit stripping, no plain-expression fallback); juxtaposed
   numbers (``2 3``, which latex2sympy adds) are not math. Otherwise the answer is ``UNPARSED``.

Kinds: ``MATH`` (compared by math-verify), ``TEXT`` (prose: compared as normalised text, see
``text_form``), ``UNPARSED`` (looks like math, e.g. ``\\frac{``, ``floor(n/2)``, but does not parse
as a whole: compared as text too). A math gold never matches a text prediction.
Convention: fragments are never compared: ``2^floor(n/2)*floor(n/2)!`` is not ``2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlvr.rewards.extract import clean_answer  # rule 1, the cleaning of an extracted answer

MATH, TEXT, UNPARSED = "math", "text", "unparsed"

NEGATIONS = frozenset({"not", "no", "never", "none", "neither", "nor", "cannot", "nothing", "nobody",
                       "without", "isn't", "doesn't", "don't", "aren't", "can't", "won't", "non"})
FUNCTIONS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "lg", "exp", "max", "min", "gcd", "lcm", "floor", "ceil", "sqrt", "frac", "binom",
    "lim", "sum", "prod", "int", "inf", "sup", "det", "mod", "pmod", "bmod", "deg", "arg", "dim",
    "sgn", "sign", "abs", "pi", "infty", "cdot", "times", "le", "ge", "leq", "geq", "neq", "ne",
})
# 2–3-letter English words; other short letter runs are products of symbols (``ab``, ``xyz``)
ENGLISH_SHORT = frozenset({
    "no", "yes", "not", "nor", "the", "is", "are", "was", "be", "of", "to", "in", "on", "at", "by",
    "if", "it", "its", "as", "an", "so", "do", "all", "any", "one", "two", "six", "ten", "odd", "for",
    "but", "has", "had", "can", "may", "non", "we", "he", "she", "you", "our", "who", "why", "how",
    "yet", "via", "ie", "eg", "up", "off", "out", "new", "let", "get", "see", "use", "way", "too",
    "ok", "and", "or", "few", "per", "set", "his", "her", "him", "me", "my", "us",
})
CONNECTIVES = frozenset({"and", "or"})
# words that carry no claim: prose made of these around one maths run is read as that maths
FILLERS = frozenset({
    "the", "answer", "final", "is", "it", "value", "only", "possible", "limit", "exists", "and",
    "equal", "equals", "to", "so", "thus", "hence", "therefore", "result", "we", "get", "solution",
})
UNIT_ABBREVIATIONS = frozenset({
    "cm", "mm", "km", "kg", "mg", "ft", "lb", "lbs", "oz", "hr", "hrs", "min", "mins", "sec", "mph",
    "kmh", "ml", "mi", "yd", "sq", "cu", "am", "pm",
})
_PERCENT_WORDS = frozenset({"percent", "percentage", "pct"})

_TEXT_COMMAND = re.compile(r"\\(?:text(?:bf|it|rm|normal)?|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_NAME_ARGUMENT = re.compile(r"\\(?:begin|end|mathbb|mathcal|mathfrak|mathbf|mathsf|boldsymbol)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]+(?:'[a-z]+)?(?![A-Za-z])")
_ABBREVIATION = re.compile(r"(?<![A-Za-z])(?:i\.e|e\.g)\.?", re.IGNORECASE)
_JUXTAPOSED_NUMBERS = re.compile(r"\d\s+\.?\d")
_UNIT_TEXT = re.compile(r"\\(?:text|mathrm|mbox|textrm)\s*\{\s*([A-Za-z]+(?:\s+[A-Za-z]+)?)\s*\}"
                        r"(?:\^\{?[23]\}?)?$")
_UNIT_BARE = re.compile(r"(?<=[\d})%])\s*((?:(?:square|cubic|sq|cu)\s+)?[A-Za-z]+)(?:\^\{?[23]\}?)?$")
_ALTERNATIVES = re.compile(r",?\s*\bor\s+equivalently\b,?|,?\s*\(?\bi\.e\.,?", re.IGNORECASE)
_SPACE_NOT_BETWEEN_WORDS = re.compile(r"(?<![A-Za-z0-9]) | (?![A-Za-z0-9])")


def text_form(answer: str) -> str:
    """Normalised text for comparing prose: ``\\text{}`` unwrapped, lower case, no punctuation.

    ``"\\text{Exactly one}."`` → ``"exactly one"``; ``"YES"`` → ``"yes"``. Spaces are kept only
    between two letters or digits, as in ``normalize_answer``.
    """
    text = clean_answer(answer)
    for _ in range(3):  # nested \text{\textbf{...}}
        text = _TEXT_COMMAND.sub(r" \1 ", text)
    # keep "!" (factorial) and a point or comma between digits (18.50, 1,000)
    text = re.sub(r"(?<!\d)[.,]|[.,](?!\d)|[;:?\"'`~]|\\[,;!: ]", " ", text.lower())
    return _SPACE_NOT_BETWEEN_WORDS.sub("", " ".join(text.split()))


def split_unit(answer: str) -> tuple[str, str | None]:
    """Rule 2: ``(core, unit)`` with the trailing unit split off, or ``(answer, None)``.

    ``"5 \\text{ cm}^2"`` → ``("5", "cm")``; ``"18 dollars"`` → ``("18", "dollar")``; ``"x+2m"`` and
    ``"3 is"`` have none (a bare one-letter or English word is not a unit).
    """
    match = _UNIT_TEXT.search(answer)
    bare = match is None
    if bare:
        match = _UNIT_BARE.search(answer)
    if match is None:
        return answer, None
    core, unit = answer[:match.start()].strip(), " ".join(match.group(1).lower().split())
    last = unit.rsplit(" ", 1)[-1]
    if (not core or last in NEGATIONS or last in ENGLISH_SHORT or last in FUNCTIONS or last in FILLERS
            or last in _PERCENT_WORDS or (bare and len(last) < 4 and last not in UNIT_ABBREVIATIONS)):
        return answer, None
    return core, _singular(unit)


def _singular(unit: str) -> str:
    unit = unit.replace("feet", "foot").replace("metre", "meter").replace("litre", "liter")
    for plural in ("ches", "s"):
        if unit.endswith(plural) and len(unit) > len(plural) + 1 and not unit.endswith("ss"):
            return unit[:-len(plural)] + ("ch" if plural == "ches" else "")
    return unit


def _words(answer: str) -> list[str]:
    """The prose words of an answer (rule 3), lower case, in order."""
    text = _NAME_ARGUMENT.sub(" ", answer)
    text = _TEXT_COMMAND.sub(r" \1 ", text)
    text = _COMMAND.sub(" ", text)
    words = [m.lower() for m in _ABBREVIATION.findall(text)]
    for match in _WORD.finditer(_ABBREVIATION.sub(" ", text)):
        word = match.group(0).lower()
        if word in FUNCTIONS or word in CONNECTIVES or word in _PERCENT_WORDS or len(word) < 2:
            continue
        if len(word) >= 4 or word in ENGLISH_SHORT or "'" in word:
            words.append(word)
    return words


def is_prose(answer: str) -> bool:
    """Rule 3: True when the (cleaned, unit-free) answer has a prose word or is letters only."""
    letters_only = re.fullmatch(r"[A-Za-z]{2,}(?:\s+[A-Za-z]+)*", answer) is not None
    if letters_only and answer.lower() not in FUNCTIONS:
        return True
    return bool(_words(answer))


def math_core(answer: str) -> str | None:
    """Rule 4: the one run of maths in a prose answer whose words are all fillers, else None.

    ``"The limit exists and is equal to 3"`` → ``"3"``; ``"0 is not the only possible value"`` →
    None (``not`` is no filler); ``"3 and 4 are the roots"`` → None (two runs, ``roots``).
    """
    text = _TEXT_COMMAND.sub(r" \1 ", answer)
    runs, current, words = [], [], []
    for token in text.split():
        bare = token.strip(".,;:!?").lower()
        is_word = re.fullmatch(r"[a-z]+(?:'[a-z]+)?", bare) is not None and (
            len(bare) >= 2 and bare not in FUNCTIONS or bare in ("a", "i"))
        if is_word:
            words.append(bare)
            if current:
                runs.append(" ".join(current))
                current = []
        else:
            current.append(token)
    if current:
        runs.append(" ".join(current))
    if len(runs) != 1 or not words or not all(word in FILLERS for word in words):
        return None
    core = clean_answer(runs[0])
    return core if core and not is_prose(core) else None


def math_strings(answer: str) -> tuple[str, ...] | None:
    """The strings that must each parse as a whole for ``answer`` (cleaned, unit-free) to be math:
    ``(answer,)``, its core, or its alternatives (rule 4); None when it is prose without a core."""
    parts = [clean_answer(part) for part in _ALTERNATIVES.split(answer)]
    if len(parts) > 1 and all(parts):
        cores = [part if not is_prose(part) else math_core(part) for part in parts]
        return tuple(cores) if all(cores) else None
    if not is_prose(answer):
        return (answer,)
    core = math_core(answer)
    return None if core is None else (core,)


_LATEX_CONFIG = None


def parse_whole(latex: str) -> list:
    """Rule 5: math-verify's reading of the whole of ``latex``, or ``[]`` when only a part parses.

    LaTeX extractor only, ``extraction_mode="first_match"`` (the first match tried is the whole
    ``$...$``: the latest-ending, then earliest-starting one), no fallback string, and no unit
    stripping (math-verify's would read ``3+2t`` as ``3+2``). Call without a math-verify timeout:
    the worker's own alarm bounds it.
    """
    global _LATEX_CONFIG
    from math_verify import LatexExtractionConfig, parse
    if _LATEX_CONFIG is None:
        from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
        _LATEX_CONFIG = LatexExtractionConfig(boxed_match_priority=-1, normalization_config=NormalizationConfig(
            basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="none", equations=False))
    if not latex or "\n" in latex or "$" in latex.replace("\\$", "") or _JUXTAPOSED_NUMBERS.search(latex):
        return []
    return parse(f"${latex}$", extraction_config=[_LATEX_CONFIG], fallback_mode="no_fallback",
                 extraction_mode="first_match", parsing_timeout=None)


@dataclass(frozen=True)
class Reading:
    """One answer as the verifier sees it: its kind, text form, unit and parsed alternatives."""

    kind: str  # MATH, TEXT or UNPARSED
    text: str  # text_form of the whole answer
    unit: str | None = None
    values: tuple = ()  # one math-verify parse per alternative (MATH only)


def read_answer(answer: str) -> Reading:
    """Rules 1–5 on one answer (gold or prediction); parses with math-verify (worker only)."""
    text = text_form(answer)
    core, unit = split_unit(clean_answer(answer))
    strings = math_strings(core)
    if strings is None:
        return Reading(TEXT, text)
    values = tuple(parse_whole(string) for string in strings)
    if not all(values):
        return Reading(UNPARSED, text)
    return Reading(MATH, text, unit, values)


def same_answer(gold: Reading, pred: Reading, verify) -> bool:
    """True when ``pred`` answers ``gold``: equal text forms for a text or unparsed gold; for a math
    gold a math prediction with no conflicting unit whose every alternative math-verify finds equal
    to one of the gold's (``verify(gold, pred)``, gold first)."""
    if gold.kind != MATH:
        return pred.text == gold.text
    if pred.kind != MATH or (gold.unit and pred.unit and gold.unit != pred.unit):
        return False
    return all(any(verify(g, p) for g in gold.values) for p in pred.values)
