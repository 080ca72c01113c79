"""``rephrase_rows``: K candidates per question → filters → up to N kept → one JSON line each.

Output: one line per question, in row order (a question retried on a later run comes later),
    {"id": "<row id>", "rephrasings": ["...", ...], "rejected": {"<reason>": count, ...}}
(reasons sorted by name; filters.py lists them). Training joins the file to the data by id.

Seeding: candidate k of row `id` gets ``random.Random(f"{seed}:{id}:{k}")``, so a question's
candidates do not depend on which other rows are processed, nor on their order.

Resuming: the file is append-only and each line is flushed and fsync'ed; rows whose id already
has a line are skipped. A last line without its newline (the run died while writing it) is cut
off and rewritten, so an interrupted run resumed with the same arguments ends with the same
bytes as an uninterrupted one. Any other unreadable line is an error. An exception out of the
rephraser (an LLM endpoint that is down raises ConnectionError) stops the run the same way: the
lines written so far stay, and a rerun resumes after them.

A question for which the rephraser gave no candidate at all (every one None: a server down, a
wrong model name) gets no line, so a rerun tries it again; it is counted as ``no_candidates``.
If that happens to the first MAX_FAILED_START questions in a row, the run stops with
GenerationFailed rather than walk through the whole dataset.

Solver check ([design]): with a ``solver`` (question → final answer or None), the solver first
answers the original question. If it gets the gold right, every candidate that passes the other
filters must also be answered right (else ``solver_wrong``); if it gets the original wrong, the
check tells nothing about that question and is skipped (counted as ``solver_skipped``), so that
hard questions are not left without rephrasings because the solver is weak.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rlvr.data.rephrase.filters import REASONS, answers_equal, select_candidates

logger = logging.getLogger(__name__)

MAX_FAILED_START = 5

Solver = Callable[[str], "str | None"]
AnswersMatch = Callable[[str, "str | None"], bool]


class GenerationFailed(RuntimeError):
    """The rephraser gave no candidate for the first MAX_FAILED_START questions."""


class Rephraser(Protocol):
    """Makes one candidate (or None) per rng for a question: RuleRephraser, LLMRephraser."""

    name: str

    def rephrase(self, question: str, rngs: list[random.Random]) -> list[str | None]: ...


@dataclass
class Tally:
    """What a run did: counts over the questions rephrased in this run (not the resumed ones)."""

    questions: int = 0
    resumed: int = 0  # rows skipped because the output file already had them
    kept: Counter = field(default_factory=Counter)  # number kept → number of questions
    rejected: Counter = field(default_factory=Counter)  # reason → candidates
    candidates: int = 0
    surplus: int = 0  # candidates not checked because N were already kept
    solver_skipped: int = 0  # questions whose original the solver got wrong (no solver check)
    no_candidates: int = 0  # questions without a single candidate: not written, retried next run
    seconds: float = 0.0

    @property
    def mean_kept(self) -> float:
        return sum(n * count for n, count in self.kept.items()) / self.questions if self.questions else 0.0

    def summary(self) -> str:
        """A few lines for the terminal."""
        histogram = ", ".join(f"{n}: {self.kept[n]}" for n in sorted(self.kept)) or "-"
        rejected = ", ".join(f"{reason} {self.rejected[reason]}" for reason in REASONS if self.rejected[reason])
        lines = [
            f"questions rephrased: {self.questions} (already in the file: {self.resumed}) in {self.seconds:.1f} s",
            (f"kept per question: mean {self.mean_kept:.2f}; histogram {{kept: questions}} {histogram}"
             if self.questions else "kept per question: - (nothing rephrased in this run)"),
            f"candidates: {self.candidates}; rejected: {rejected or 'none'}; not needed: {self.surplus}",
        ]
        if self.no_candidates:
            lines.append(f"no candidate at all (not written; rerun to retry): {self.no_candidates} questions")
        if self.solver_skipped:
            lines.append(f"solver check skipped on {self.solver_skipped} questions (solver wrong on the original)")
        return "\n".join(lines)


def candidate_rng(seed: int, row_id: str, k: int) -> random.Random:
    """The rng of candidate k of a row (module docstring)."""
    return random.Random(f"{seed}:{row_id}:{k}")


def read_done_ids(out_path: str | Path) -> set[str]:
    """Ids already written to `out_path`; a partial last line is cut off the file first."""
    path = Path(out_path)
    if not path.exists():
        return set()
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        logger.warning("%s: dropping a partial last line (%d bytes) to rewrite it", path, len(data) - complete)
        with path.open("r+b") as file:
            file.truncate(complete)
    done = set()
    for number, line in enumerate(data[:complete].decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            row_id = record["id"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(
                f"line {number} of {path} is not a rephrasing record ({type(error).__name__}: {error}); "
                "delete that line (or the file) and rerun to regenerate it"
            ) from error
        done.add(str(row_id))
    return done


def _question(row: dict) -> str:
    prompt = row.get("prompt")
    if not isinstance(prompt, str):
        raise ValueError(  # like rows.py: a bad dataset row is a ValueError, whatever its type
            f"row {row.get('id')!r}: rephrasing needs a plain-text prompt, got a {type(prompt).__name__}; "
            "normalize rows with rlvr.data.load_rows and use a dataset whose question is a string"
        )
    return prompt


def _check_counts(n: int, k: int, seed: int) -> None:
    for name, value, least in (("n", n, 1), ("k", k, n), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}"
                             + ("; K candidates are filtered down to at most N" if name == "k" else ""))


def _solver_check(solver: Solver | None, answers_match: AnswersMatch, question: str, gold: str):
    """(check for candidates or None, whether the check was skipped because the original failed)."""
    if solver is None:
        return None, False
    if not answers_match(gold, solver(question)):
        return None, True
    return (lambda candidate: answers_match(gold, solver(candidate))), False


def _count_no_candidates(tally: Tally, rephraser: Rephraser) -> None:
    tally.no_candidates += 1
    if tally.questions == 0 and tally.no_candidates >= MAX_FAILED_START:
        raise GenerationFailed(
            f"{rephraser!r} gave no candidate for the first {tally.no_candidates} questions (a server that "
            "cannot be reached, a wrong model name, a rule set that suits none of them); nothing was written "
            "for them — fix the generator and rerun"
        )


def _append_line(file, record: dict) -> None:
    file.write(json.dumps(record, ensure_ascii=False) + "\n")
    file.flush()
    os.fsync(file.fileno())


def rephrase_rows(rows: Iterable[dict], rephraser: Rephraser, *, n: int, k: int | None = None, seed: int = 0,
                  out_path: str | Path, solver: Solver | None = None,
                  answers_match: AnswersMatch = answers_equal, progress: bool = True) -> Tally:
    """Rephrase every row not yet in `out_path` and append its line (module docstring).

    Args:
        rows: normalized rows (rlvr.data.load_rows) with string prompts.
        rephraser: RuleRephraser, LLMRephraser or any Rephraser.
        n: the most rephrasings kept per question.
        k: candidates generated per question (default 2·n), k ≥ n.
        seed: base of the per-candidate rngs.
        out_path: the .jsonl file, created or appended to.
        solver: question → final answer (or None), for the solver check; None: no check.
        answers_match: (gold, answer) → same answer; the CLI passes a math-verify comparison.
        progress: show a tqdm progress bar.
    """
    from tqdm.auto import tqdm

    k = 2 * n if k is None else k
    _check_counts(n, k, seed)
    rows = list(rows)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = read_done_ids(out_path)
    pending = [row for row in rows if str(row["id"]) not in done]
    tally = Tally(resumed=len(rows) - len(pending))
    start = time.perf_counter()
    with out_path.open("a", encoding="utf-8") as file, \
            tqdm(pending, desc=f"rephrase ({rephraser.name})", unit="q", disable=not progress) as bar:
        for row in bar:
            question = _question(row)
            rngs = [candidate_rng(seed, str(row["id"]), j) for j in range(k)]
            candidates = rephraser.rephrase(question, rngs)
            assert len(candidates) == k, f"{rephraser!r} returned {len(candidates)} candidates for {k} rngs"
            if all(candidate is None for candidate in candidates):
                _count_no_candidates(tally, rephraser)
                continue
            check, skipped = _solver_check(solver, answers_match, question, str(row["answer"]))
            selection = select_candidates(question, candidates, n=n, solver_check=check)
            _append_line(file, {"id": row["id"], "rephrasings": selection.kept,
                                "rejected": dict(sorted(selection.rejected.items()))})
            tally.questions += 1
            tally.kept[len(selection.kept)] += 1
            tally.rejected.update(selection.rejected)
            tally.candidates += k
            tally.surplus += selection.surplus
            tally.solver_skipped += skipped
            bar.set_postfix(mean_kept=f"{tally.mean_kept:.2f}", refresh=False)
    tally.seconds = time.perf_counter() - start
    return tally
