"""Well-known evaluation benchmarks by short name: where they live and how to read their gold.

    name           Hub dataset (config) split              question    gold
    math-500       HuggingFaceH4/MATH-500 test              problem     answer
    aime24         HuggingFaceH4/aime_2024 train            problem     answer
    aime25         math-ai/aime25 test                      problem     answer
    amc            AI-MO/aimo-validation-amc train          problem     answer (a float, 142.0 → "142")
    minerva        math-ai/minervamath test                 question    answer
    olympiadbench  Hothan/OlympiadBench (OE_TO_maths_en_COMP) train
                                                            question    final_answer (a list; joined ", ")
    gsm8k          openai/gsm8k (main) test                 question    answer ("… #### N" → N)
    gpqa-diamond   Idavidrein/gpqa (gpqa_diamond) train     Question    multiple choice, see below

Verified (dataset cards and public loaders seen through a search index, not by downloading):
the ids, splits and columns above, and the OlympiadBench config. Unverified offline: the dtype of
AMC's `answer` (handled either way), that aime25 has no usable id column (rows are numbered by
position), and whether the OlympiadBench multi-answer golds verify as tuples in math-verify.
GPQA is gated: accept its terms on the Hub and log in first.

GPQA-diamond gold letter: the four options [Correct Answer, Incorrect Answer 1, 2, 3] are shuffled
by a random.Random seeded with the SHA-256 of the question text (so the order is the same on every
machine and run, and independent of row order), listed after the question as "A) …" to "D) …",
and the gold is the letter where the correct answer landed. The model should answer
\\boxed{C}; the verifier's exact-match fast path compares letters.

Offline (no Hub): pass `path=` a local .jsonl/.json/.parquet with the benchmark's own columns
(the same mapping applies), or use an offline source of rlvr.data.load_rows (gsm8k-100, rg:NAME).
As an eval spec: `math-500:path=/data/math500.parquet`.
Row ids: "<name>:<id column>" when the benchmark has a usable id column, else "<name>#<index>";
the same for the Hub and a local copy, so a resumed evaluation matches rows across both.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlvr.data.gsm8k100 import GSM8K100_NAME
from rlvr.data.reasoning_gym_source import RG_PREFIX
from rlvr.data.rows import normalize_rows
from rlvr.data.sources import _READERS, LOCAL_SUFFIXES
from rlvr.data.spec_options import split_options

CHOICE_LETTERS = "ABCD"
GPQA_WRONG_COLUMNS = ("Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark lives on the Hub and which columns hold its question and gold."""

    hub_id: str
    split: str
    config: str | None
    question: str  # column with the question text
    answer: str  # column with the gold (GPQA: the correct option's text)
    gold: str  # key of GOLD_READERS: how the gold column becomes the gold answer string
    id_column: str | None = None  # a column of unique ids, else rows are numbered by position


def _plain(value) -> str:
    """A gold value as text; an integral float (AMC stores 142.0) becomes "142"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else str(value)


def _read_text(row: dict, bench: Benchmark) -> tuple[str, str]:
    return row[bench.question], _plain(row[bench.answer])


def _read_gsm8k(row: dict, bench: Benchmark) -> tuple[str, str]:
    # The full worked answer ending in "#### N": normalize_rows takes N as the gold and keeps the
    # text as `solution`.
    return row[bench.question], row[bench.answer]


def _read_list(row: dict, bench: Benchmark) -> tuple[str, str]:
    value = row[bench.answer]
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"column {bench.answer!r} is an empty list; the row has no gold answer")
        return row[bench.question], ", ".join(str(item).strip() for item in value)
    return row[bench.question], _plain(value)


def _read_choice(row: dict, bench: Benchmark) -> tuple[str, str]:
    question = row[bench.question].strip()
    options = [row[bench.answer], *(row[column] for column in GPQA_WRONG_COLUMNS)]
    options = [str(option).strip() for option in options]
    order = list(range(len(options)))
    random.Random(hashlib.sha256(question.encode("utf-8")).hexdigest()).shuffle(order)
    listed = "\n".join(f"{CHOICE_LETTERS[slot]}) {options[index]}" for slot, index in enumerate(order))
    return f"{question}\n\n{listed}", CHOICE_LETTERS[order.index(0)]


GOLD_READERS: dict[str, Callable[[dict, Benchmark], tuple[str, str]]] = {
    "text": _read_text,
    "gsm8k": _read_gsm8k,
    "list": _read_list,
    "choice": _read_choice,
}

BENCHMARKS: dict[str, Benchmark] = {
    "math-500": Benchmark("HuggingFaceH4/MATH-500", "test", None, "problem", "answer", "text", "unique_id"),
    "aime24": Benchmark("HuggingFaceH4/aime_2024", "train", None, "problem", "answer", "text", "id"),
    "aime25": Benchmark("math-ai/aime25", "test", None, "problem", "answer", "text"),
    "amc": Benchmark("AI-MO/aimo-validation-amc", "train", None, "problem", "answer", "text"),
    "minerva": Benchmark("math-ai/minervamath", "test", None, "question", "answer", "text"),
    "olympiadbench": Benchmark(
        "Hothan/OlympiadBench", "train", "OE_TO_maths_en_COMP", "question", "final_answer", "list", "id"
    ),
    "gsm8k": Benchmark("openai/gsm8k", "test", "main", "question", "answer", "gsm8k"),
    "gpqa-diamond": Benchmark("Idavidrein/gpqa", "train", "gpqa_diamond", "Question", "Correct Answer", "choice"),
}

_OFFLINE_SOURCES = (
    f"offline sources: '{GSM8K100_NAME}', '{RG_PREFIX}NAME[:key=value...]' (reasoning-gym), a local "
    f"{'/'.join(LOCAL_SUFFIXES)} file, or 'BENCHMARK:path=FILE' with a local copy of the benchmark"
)


def benchmark_spec(spec: str) -> tuple[str, str | None] | None:
    """(name, local path or None) when `spec` is 'NAME' or 'NAME:path=FILE' of a registered benchmark."""
    name, *option_parts = spec.strip().split(":")
    if name not in BENCHMARKS:
        return None
    options = split_options(option_parts, spec)
    unknown = sorted(set(options) - {"path"})
    if unknown:
        raise ValueError(f"benchmark spec {spec!r}: unknown option(s) {unknown}; only path=FILE is accepted")
    return name, options.get("path")


def _map_rows(raw_rows, name: str, bench: Benchmark) -> list[dict]:
    read = GOLD_READERS[bench.gold]
    rows = []
    for index, raw in enumerate(raw_rows):
        needed = [bench.question, bench.answer] + (list(GPQA_WRONG_COLUMNS) if bench.gold == "choice" else [])
        missing = [column for column in needed if column not in raw]
        if missing:
            raise ValueError(
                f"row {index} of benchmark {name!r} lacks column(s) {missing} (it has {sorted(raw)}); "
                f"a local copy must keep the Hub columns of {bench.hub_id}"
            )
        try:
            prompt, answer = read(raw, bench)
        except ValueError as error:
            raise ValueError(f"row {index} of benchmark {name!r}: {error}") from error
        row = {"prompt": prompt, "answer": answer}
        if bench.id_column is not None and raw.get(bench.id_column) not in (None, ""):
            row["id"] = f"{name}:{raw[bench.id_column]}"
        rows.append(row)
    return normalize_rows(rows, name)


def _read_local(path: str) -> list[dict]:
    file = Path(path).expanduser()
    suffix = file.suffix.lower()
    if suffix not in _READERS:
        raise ValueError(
            f"{file}: unsupported file type {suffix or '(none)'!r}; use one of {', '.join(LOCAL_SUFFIXES)}"
        )
    if not file.is_file():
        raise ValueError(f"benchmark file {str(file)!r} does not exist (resolved: {file.resolve()}); check the path")
    return _READERS[suffix](file)


def _read_hub(name: str, bench: Benchmark) -> list[dict]:
    import datasets

    try:
        return list(datasets.load_dataset(bench.hub_id, bench.config, split=bench.split))
    except Exception as error:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        offline = [var for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if os.environ.get(var, "") not in ("", "0")]
        why = (
            f"{' and '.join(offline)} {'is' if len(offline) == 1 else 'are'} set and it is not in the local "
            "datasets cache (benchmarks are not shipped offline)"
            if offline
            else "check your connection (and, for gated sets such as GPQA, that you accepted the terms and logged in)"
        )
        raise ValueError(
            f"could not load benchmark {name!r} from the Hugging Face Hub ({bench.hub_id}, config "
            f"{bench.config!r}, split {bench.split!r}): {why}. Use instead one of the {_OFFLINE_SOURCES}. "
            f"({type(error).__name__}: {error})"
        ) from error


def load_benchmark(name: str, *, path: str | None = None) -> list[dict]:
    """Normalized rows of a registered benchmark, from the Hub or from a local copy at `path`."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; registered: {', '.join(BENCHMARKS)}")
    bench = BENCHMARKS[name]
    raw_rows = _read_local(path) if path is not None else _read_hub(name, bench)
    return _map_rows(raw_rows, name, bench)
