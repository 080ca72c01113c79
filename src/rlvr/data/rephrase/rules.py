"""Offline, rule-based rephrasing: four kinds of meaning-preserving transforms.

Each transform is ``(question, rng) -> str | None`` (None: nothing to change in this question),
deterministic given ``rng`` (a ``random.Random``). None of them changes, adds, drops, spells
out or reformats a number, or renames anything: they only touch wording around the quantities,
the order of independent sentences, the layout, and operator symbols.

- ``wording``: a problem that is one instruction plus one arithmetic expression ("Calculate
  5 - 3 - 6.") is re-rendered with another template ("What is 5 - 3 - 6?"); any other question
  gets one or more of: a question ↔ imperative swap of its final sentence ("What is the total
  cost?" ↔ "Find the total cost.", also trading the verbs calculate/compute/find/determine/work
  out), same-meaning phrase swaps (SYNONYMS: bought → purchased, "80 emails a day" → "80 emails
  per day", each day ↔ every day, ...), an instruction wrapper ("Solve the following problem:
  ...", "... Give the final answer.").
- ``reorder``: "If C, how many ...?" ↔ "How many ... if C?" (clauses without commas), or a swap
  of two adjacent context sentences that are independent (sentences.is_dependent) parallel
  statements about different actors (same word after the subject, no shared names: "Tom has 3
  cats. Sara has 2 dogs.") and are not followed by a sentence with a pronoun. The final
  question sentence always stays last.
- ``list_format``: prose → the facts as a bullet list, then the question (a leading "If C, ..."
  clause of the question may become a fact); a bullet list → prose.
- ``notation``: operators of arithmetic expressions as words or other symbols
  (``+`` ↔ plus, ``-`` ↔ minus, ``*``/``×`` ↔ times, ``/``/``÷`` ↔ divided by, ``=`` ↔ equals);
  see arithmetic.py for what counts as an operator.

``RuleRephraser`` composes them: candidate k applies the k-th applicable kind (round robin) plus
each other applicable kind with probability 1/2, in the order reorder → list_format → wording →
notation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from rlvr.data.rephrase.arithmetic import OPERATOR_STYLES, expression_question, rewrite_operators, words_to_symbols
from rlvr.data.rephrase.sentences import has_pronoun, is_dependent, names, split_sentences, subject_and_next

Transform = Callable[[str, random.Random], "str | None"]

EXPRESSION_TEMPLATES = (
    "Calculate {e}.",
    "Compute {e}.",
    "Evaluate {e}.",
    "What is {e}?",
    "Find the value of {e}.",
    "Work out {e}.",
    "Determine the value of {e}.",
    "What does {e} equal?",
    "Give the result of {e}.",
    "{e} = ?",
    "Evaluate the expression {e}.",
    "What is the value of {e}?",
    "State the final answer to the following arithmetic problem: {e} =",
    "Here is an arithmetic expression: {e}. What is its value?",
    "Expression: {e}\nWhat is its value?",
    "Solve the following problem: {e} =",
)
WRAPPER_PREFIXES = (
    "Solve the following problem:",
    "Here is a question.",
    "Solve this word problem.",
    "Read the problem below and answer the question.",
    "Problem:",
    "Answer the following question.",
    "Consider this problem.",
    "Work through this problem:",
    "Try this problem.",
)
_LABEL_PREFIXES = ("Problem:", "Work through this problem:")  # not above a "Facts:" block
WRAPPER_SUFFIXES = ("Give the final answer.", "Answer the question above.", "What is the answer?")
IMPERATIVE_VERBS = ("Calculate", "Compute", "Find", "Determine", "Work out")
LIST_LAYOUTS = (  # (header line, bullet, label before the question)
    ("", "- ", ""),
    ("Facts:", "- ", "Question: "),
    ("Given:", "• ", ""),
    ("Information:", "- ", "Question: "),
    ("What we know:", "- ", ""),
    ("", "* ", ""),
)
EXTRA_KIND_PROBABILITY = 0.5
_UNITS = r"(day|week|month|year|hour|minute)"
_NOT_A_RATE = frozenset("is was has does this his its as us yes".split())  # "It was a day" stays
# (pattern, replacement): same-meaning swaps, one direction where the other is ambiguous
# ("purchase" and "needs" may be nouns, "would like to" does not say the person).
SYNONYMS = (
    (r"\bbought\b", "purchased"),
    (r"\bpurchased\b", "bought"),
    (r"\bbuys\b", "purchases"),
    (r"\bbuy\b", "purchase"),
    (r"\bwants to\b", "would like to"),
    (r"\bwant to\b", "would like to"),
    (r"\b(?:is|are) going to\b", "will"),
    (r"\bin total(?=[?.!,])", "altogether"),
    (r"\baltogether(?=[?.!,])", "in total"),
    (rf"\beach {_UNITS}\b", r"every \1"),
    (rf"\bevery {_UNITS}\b", r"each \1"),
    (rf"\b(\S+) an? {_UNITS}\b", lambda m: _rate(m)),
    (rf"\bper {_UNITS}\b", lambda m: f"{'an' if m.group(1) == 'hour' else 'a'} {m.group(1)}"),
    (r"\breceives\b", "gets"),
    (r"\breceived\b", "got"),
    (r"\bearns\b", "makes"),
    (r"\bearned\b", "made"),
    (r"\brequires\b", "needs"),
)

_DETERMINER = r"(the|his|her|their|its|your|our)"
_WHAT_IS = re.compile(rf"^(?:What is|What was|What's|What will be) {_DETERMINER} ([^?]+)\?$")
_IMPERATIVE = re.compile(rf"^(Calculate|Compute|Find|Determine|Work out) {_DETERMINER} ([^.?!]+)\.$")
_FINAL_BOUNDARY = re.compile(r"[.!?][\"')\]]*\s+(?=\S)|\n+|:\s+")
_IF_FIRST = re.compile(r"^If ([^,?]+), ([a-z][^,]*\?)$")
_IF_LAST = re.compile(r"^((?:How|What)[^,]*?) if ([^,?]+)\?$")
_COUNTERFACTUAL = re.compile(r"\b(were|would|had|could|might)\b")
_BULLET = re.compile(r"^\s*(?:[-*•])\s+(.*\S)\s*$")
_SYNONYM_PATTERNS = tuple((re.compile(pattern, re.IGNORECASE), replacement) for pattern, replacement in SYNONYMS)


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _split_final(text: str) -> tuple[str, str]:
    """(everything before the final sentence, the final sentence)."""
    last = None
    for last in _FINAL_BOUNDARY.finditer(text):
        pass
    if last is None:
        return "", text
    return text[:last.end()], text[last.end():]


def _rate(match: re.Match) -> str:
    """"80 emails a day" → "80 emails per day"; "It was a day" stays (the word before is no amount)."""
    before = match.group(1)
    if before.lower() in _NOT_A_RATE or before[-1] not in "s0123456789":
        return match.group(0)
    return f"{before} per {match.group(2)}"


# --- wording ---------------------------------------------------------------------------------


def _final_sentence_options(final: str) -> list[str]:
    options = []
    if (m := _WHAT_IS.match(final)) is not None:
        options += [f"{verb} {m.group(1)} {m.group(2)}." for verb in IMPERATIVE_VERBS]
    if (m := _IMPERATIVE.match(final)) is not None:
        options.append(f"What is {m.group(2)} {m.group(3)}?")
        options += [f"{verb} {m.group(2)} {m.group(3)}." for verb in IMPERATIVE_VERBS if verb != m.group(1)]
    return options


def _wrap(question: str, rng: random.Random) -> str:
    multiline = "\n" in question
    prefixes = [p for p in WRAPPER_PREFIXES if p not in question and not (multiline and p in _LABEL_PREFIXES)]
    pool = prefixes + [s for s in WRAPPER_SUFFIXES if s not in question]
    choice = rng.choice(pool)
    if choice in WRAPPER_SUFFIXES:
        return f"{question}\n\n{choice}"
    on_own_line = multiline or rng.random() < 0.5
    return f"{choice}\n\n{question}" if on_own_line else f"{choice} {question}"


def _synonym_edits(text: str) -> list[list[tuple[int, int, str]]]:
    """Per SYNONYMS rule that changes something: its edits (start, end, replacement)."""
    per_rule = []
    for pattern, replacement in _SYNONYM_PATTERNS:
        edits = []
        for match in pattern.finditer(text):
            new = match.expand(replacement) if isinstance(replacement, str) else replacement(match)
            if new != match.group(0):
                if match.group(0)[:1].isupper():
                    new = _capitalize(new)
                edits.append((match.start(), match.end(), new))
        if edits:
            per_rule.append(edits)
    return per_rule


def _apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    pieces, cursor = [], 0
    for start, end, new in sorted(edits):
        if start < cursor:
            continue  # overlaps an earlier edit: all edits refer to the original text
        pieces += [text[cursor:start], new]
        cursor = end
    return "".join(pieces) + text[cursor:]


def _synonyms(text: str, rng: random.Random) -> str | None:
    per_rule = _synonym_edits(text)
    if not per_rule:
        return None
    chosen = [edits for edits in per_rule if rng.random() < EXTRA_KIND_PROBABILITY] or [rng.choice(per_rule)]
    return _apply_edits(text, [edit for edits in chosen for edit in edits])


def _final_sentence(text: str, rng: random.Random) -> str | None:
    head, final = _split_final(text)
    options = _final_sentence_options(final)
    return head + rng.choice(options) if options else None


def wording(question: str, rng: random.Random) -> str | None:
    """Instruction templates, question ↔ imperative swaps, synonyms, wrappers (module docstring)."""
    parsed = expression_question(question)
    if parsed is not None:
        _, expression = parsed
        renderings = [t.format(e=expression) for t in EXPRESSION_TEMPLATES]
        renderings = [r for r in renderings if r != question.strip()]
        return rng.choice(renderings)
    # One edit chosen for sure, each other applicable one with probability 1/2; wrapper last.
    edits = [edit for edit in (_final_sentence, _synonyms) if edit(question, random.Random(0)) is not None]
    edits.append(_wrap)
    primary = rng.choice(edits)
    text = question
    for edit in edits:
        if edit is primary or rng.random() < EXTRA_KIND_PROBABILITY:
            text = edit(text, rng) or text
    return text


# --- reorder ---------------------------------------------------------------------------------


def _clause_swap(final: str) -> str | None:
    if (m := _IF_FIRST.match(final)) is not None:
        main = m.group(2)[:-1]
        return f"{_capitalize(main)} if {m.group(1)}?"
    if (m := _IF_LAST.match(final)) is not None:
        return f"If {m.group(2)}, {_lower_first(m.group(1))}?"
    return None


def _swappable(first: str, second: str, following: str) -> bool:
    """Two parallel statements about different actors ("Tom has 3 cats. Sara has 2 dogs.")."""
    if is_dependent(first) or is_dependent(second) or has_pronoun(following):
        return False
    (subject_1, verb_1), (subject_2, verb_2) = subject_and_next(first), subject_and_next(second)
    # Parallel (same word after the subject) and about different actors: a narrative pair
    # ("Cole hid 3 dozen eggs. Lamar finds 5 eggs.") keeps its order.
    return (subject_1 != subject_2 and verb_1 == verb_2
            and not (names(first) | {subject_1}) & (names(second) | {subject_2}))


def reorder(question: str, rng: random.Random) -> str | None:
    """Move an "if" clause of the final sentence, or swap two independent context sentences."""
    sentences = split_sentences(question)
    if not sentences:
        return None
    options = []
    swapped_final = _clause_swap(sentences[-1])
    if swapped_final is not None:
        options.append(sentences[:-1] + [swapped_final])
    for i in range(len(sentences) - 2):
        if _swappable(sentences[i], sentences[i + 1], sentences[i + 2]):
            options.append(sentences[:i] + [sentences[i + 1], sentences[i]] + sentences[i + 2:])
    if not options:
        return None
    return " ".join(rng.choice(options))


# --- list format -----------------------------------------------------------------------------


def _list_to_prose(question: str) -> str | None:
    lines = question.splitlines()
    bullets = [_BULLET.match(line) for line in lines]
    if sum(b is not None for b in bullets) < 2:
        return None
    out = []
    for line, bullet in zip(lines, bullets, strict=True):
        if bullet is None:
            if line.strip():
                out.append(line.strip())
            continue
        item = bullet.group(1)
        out.append(item if item[-1] in ".!?:" else item + ".")
    return " ".join(out)


def list_format(question: str, rng: random.Random) -> str | None:
    """Prose → facts as a bullet list then the question; a bullet list → prose."""
    if "\n" in question:
        return _list_to_prose(question)
    sentences = split_sentences(question)
    if not sentences:
        return None
    facts, final = sentences[:-1], sentences[-1]
    clause = _IF_FIRST.match(final)
    if clause is not None and not _COUNTERFACTUAL.search(clause.group(1)) and (not facts or rng.random() < 0.5):
        facts = facts + [_capitalize(clause.group(1)) + "."]
        final = _capitalize(clause.group(2))
    if not facts:
        return None
    header, bullet, label = rng.choice(LIST_LAYOUTS)
    block = "\n".join(bullet + fact for fact in facts)
    return (f"{header}\n" if header else "") + f"{block}\n\n{label}{final}"


# --- notation --------------------------------------------------------------------------------


def notation(question: str, rng: random.Random) -> str | None:
    """Operator symbols ↔ words in arithmetic expressions (arithmetic.py)."""
    as_symbols = words_to_symbols(question, times=rng.choice(("*", "×")), divided=rng.choice(("/", "÷")))
    if as_symbols is not None:
        return as_symbols
    rewritten = {style: rewrite_operators(question, style) for style in OPERATOR_STYLES}
    options = sorted({text for text in rewritten.values() if text is not None})
    return rng.choice(options) if options else None


TRANSFORMS: dict[str, Transform] = {
    "reorder": reorder,
    "list_format": list_format,
    "wording": wording,
    "notation": notation,
}


class RuleRephraser:
    """Candidates from composed rule transforms (module docstring); a rephraser for pipeline.py.

    Args:
        kinds: the transform kinds to use, a subset of TRANSFORMS (applied in TRANSFORMS order).
    """

    name = "rules"

    def __init__(self, kinds: tuple[str, ...] = tuple(TRANSFORMS)):
        unknown = [kind for kind in kinds if kind not in TRANSFORMS]
        if unknown or not kinds:
            raise ValueError(f"unknown or no rule kinds {unknown or kinds!r}; choose from {', '.join(TRANSFORMS)}")
        self.kinds = tuple(kind for kind in TRANSFORMS if kind in kinds)

    def __repr__(self) -> str:
        return f"RuleRephraser(kinds={self.kinds!r})"

    def rephrase(self, question: str, rngs: list[random.Random]) -> list[str | None]:
        """One candidate per rng; None where no transform changes the question."""
        # Transforms return None exactly when nothing in the question suits them, whatever the rng.
        applicable = [kind for kind in self.kinds if TRANSFORMS[kind](question, random.Random(0)) is not None]
        candidates: list[str | None] = []
        for k, rng in enumerate(rngs):
            if not applicable:
                candidates.append(None)
                continue
            primary = applicable[k % len(applicable)]
            chosen = {kind for kind in applicable if kind == primary or rng.random() < EXTRA_KIND_PROBABILITY}
            text = question
            for kind in applicable:
                if kind in chosen:
                    text = TRANSFORMS[kind](text, rng) or text
            candidates.append(None if text == question else text)
        return candidates
