"""Normalize dataset rows to the rlvr row format (docs/design/conventions.md, "Dataset rows and reward functions").

A normalized row has
    id           str — the `id` column (ints accepted), else f"{source}#{index}"
    prompt       non-empty str, or non-empty list of {role, content} messages
                 (roles system/user/assistant, at least one user message)
    answer       gold answer string
    solution     optional full expert solution text (DaGRPO anchors)
    rephrasings  optional list of non-empty strings (TA-GRPO)
    solution_as_gold  the short `solution` that was read as the gold (see below), if any
plus every other column unchanged, because reward functions receive dataset columns
(``rlvr.train.rewarding.reward_columns``: every column but the prompt, under the dataset's own names).

Aliases: prompt ← prompt | question | problem (first present wins);
gold ← answer | ground_truth | reward_model.ground_truth (verl's rows: `reward_model` is
{"style": "rule", "ground_truth": ...}; first present wins), else derived from `solution`:
    - a gold with a GSM8K `#### N` tail gives N (thousands commas removed) and, when the row has
      no `solution` column, the full text becomes `solution`;
    - a `solution` alone gives its last `\\boxed{}` or `#### N`; failing both, a short single-line
      solution (≤ 64 chars) *is* the gold, and is then not kept as `solution` (it is not a
      solution text: no anchor or SFT target is made from it) but as `solution_as_gold`, which
      reward functions still receive as `solution`; anything else is an error.
Convention: `None` in an optional column (`solution`, `rephrasings`) means the row has none,
because columnar formats (parquet, datasets) fill gaps with null; the key is then left out, so
`"solution" in row` means the row has a usable solution. `None` anywhere else is an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rlvr.data.gold import gsm8k_tail, has_gsm8k_mark, last_boxed

PROMPT_ALIASES = ("prompt", "question", "problem")
GOLD_ALIASES = ("answer", "ground_truth")
MESSAGE_ROLES = ("system", "user", "assistant")
OPTIONAL_FIELDS = ("solution", "rephrasings")
MAX_BARE_SOLUTION_CHARS = 64
# Where a row keeps a short `solution` that was read as the gold (not an expert solution text).
GOLD_ONLY_SOLUTION = "solution_as_gold"
# environment_factory runs: the dataset's row as it was given (what TRL passes to reset and the reward functions)
DATASET_ROW = "dataset_row"
EMPTY_PROMPT = ({"role": "user", "content": ""},)  # an environment row without a prompt (TRL's default)
# rlvr's own row fields that are not dataset columns: reward functions do not receive them.
INTERNAL_FIELDS = ("prompt", "rephrasings", GOLD_ONLY_SOLUTION, DATASET_ROW)

VERL_GOLD = "reward_model.ground_truth"  # verl's parquet rows: reward_model = {"style": "rule", "ground_truth": ...}
_GOLD_FIX = "every row needs a gold answer in 'answer' (or 'ground_truth')"


def _where(index: int, source: str, row_id: str | None) -> str:
    if row_id is None:
        return f"row {index} of {source}"
    return f"row {index} (id {row_id!r}) of {source}"


def _explicit_id(row: dict, index: int, source: str) -> str | None:
    if "id" not in row:
        return None
    value = row["id"]
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(
        f"{_where(index, source, None)}: field 'id' is {value!r} ({type(value).__name__}); "
        "ids must be non-empty strings or integers — fix the value or drop the 'id' column"
    )


def _check_messages(messages: list, where: str, field: str, *, empty: bool = False) -> list[dict]:
    if not messages:
        raise ValueError(f"{where}: field {field!r} is an empty message list; give at least one user message")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ValueError(
                f"{where}: field {field!r} message {position} is {message!r}; "
                "each message must be a dict with 'role' and 'content'"
            )
        if message["role"] not in MESSAGE_ROLES:
            raise ValueError(
                f"{where}: field {field!r} message {position} has role {message['role']!r}; "
                f"use one of {', '.join(MESSAGE_ROLES)}"
            )
        content = message["content"]
        if not isinstance(content, str) or not (content.strip() or (empty and content == "")):
            raise ValueError(
                f"{where}: field {field!r} message {position} has content {content!r}; "
                "content must be a non-empty string"
            )
    if not any(message["role"] == "user" for message in messages):
        raise ValueError(f"{where}: field {field!r} has no user message; add one with the question")
    return list(messages)


def _prompt(row: dict, where: str, *, environment: bool = False) -> str | list[dict]:
    """The row's prompt; ``environment`` (environment_factory): may be missing or an empty user message, as TRL
    takes them (the environment's reset supplies the text)."""
    field = next((name for name in PROMPT_ALIASES if name in row), None)
    if field is None and environment:
        return [dict(message) for message in EMPTY_PROMPT]
    if field is None:
        raise ValueError(
            f"{where}: field 'prompt' is missing; every row needs the question in 'prompt' "
            f"(or 'question' / 'problem'); the row has columns {sorted(row)}"
        )
    value = row[field]
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: field {field!r} is empty; every row needs a non-empty prompt")
        return value
    if isinstance(value, (list, tuple)):
        return _check_messages(list(value), where, field, empty=environment)
    raise ValueError(
        f"{where}: field {field!r} is a {type(value).__name__} ({value!r}); "
        "a prompt must be a string or a list of {role, content} messages"
    )


def _gold_text(value: Any, where: str, field: str) -> str:
    """A gold value as text: strings stripped, ints and finite floats converted with str()."""
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise ValueError(
            f"{where}: field {field!r} is a {type(value).__name__} ({value!r}); "
            f"{_GOLD_FIX} as a string or number"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: field {field!r} is {value!r}; {_GOLD_FIX} as a finite number")
    text = value.strip() if isinstance(value, str) else str(value)
    if not text:
        raise ValueError(f"{where}: field {field!r} is empty; {_GOLD_FIX}")
    return text


def _gold_from_tail(text: str, where: str, field: str) -> str:
    tail = gsm8k_tail(text)
    if tail is None:
        raise ValueError(
            f"{where}: field {field!r} contains '####' but no final answer on the line after it; "
            "end the text with '#### <answer>' or remove the marker"
        )
    return tail


def _gold_from_solution(solution: str, where: str) -> tuple[str, bool]:
    """(gold, solution_is_full_text) for a row whose only answer source is `solution`."""
    boxed = last_boxed(solution)
    if boxed == "":
        raise ValueError(f"{where}: field 'solution' ends with an empty \\boxed{{}}; {_GOLD_FIX}")
    if boxed is not None:
        return boxed, True
    if has_gsm8k_mark(solution):
        return _gold_from_tail(solution, where, "solution"), True
    if "\n" not in solution and len(solution) <= MAX_BARE_SOLUTION_CHARS:
        return solution, False
    raise ValueError(
        f"{where}: field 'solution' has no \\boxed{{}} or '#### N' final answer and is too long "
        f"(> {MAX_BARE_SOLUTION_CHARS} chars or several lines) to be a bare answer; {_GOLD_FIX}"
    )


def _optional_solution(row: dict, where: str) -> str | None:
    value = row.get("solution")
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(
            f"{where}: field 'solution' is a {type(value).__name__} ({value!r}); "
            "it must be the full solution text (a string) — fix it or drop the column"
        )
    if not value.strip():
        raise ValueError(f"{where}: field 'solution' is empty; give the full solution text or drop the column")
    return value


def _answer_and_solution(row: dict, where: str, gold: bool = True) -> tuple[str | None, str | None, str | None]:
    """(gold, expert solution text or None, the column the gold was read from); ``gold=False``: a row without
    any gold column gives (None, None, None) instead of an error."""
    solution = _optional_solution(row, where)
    field = next((name for name in GOLD_ALIASES if name in row), None)
    if field is None and isinstance(row.get("reward_model"), dict) and "ground_truth" in row["reward_model"]:
        text = _gold_text(row["reward_model"]["ground_truth"], where, VERL_GOLD)
        return (_gold_from_tail(text, where, VERL_GOLD) if has_gsm8k_mark(text) else text), solution, VERL_GOLD
    if field is None:
        if solution is None and not gold:
            return None, None, None
        if solution is None:
            raise ValueError(f"{where}: field 'answer' is missing; {_GOLD_FIX}, or a 'solution' ending in \\boxed{{}}")
        gold, is_full_text = _gold_from_solution(solution.strip(), where)
        return gold, (solution if is_full_text else None), "solution"
    text = _gold_text(row[field], where, field)
    if has_gsm8k_mark(text):
        gold = _gold_from_tail(text, where, field)
        return gold, (solution if solution is not None else row[field]), field
    return text, solution, field


def _rephrasings(row: dict, where: str) -> list[str] | None:
    value = row.get("rephrasings")
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"{where}: field 'rephrasings' is a {type(value).__name__} ({value!r}); "
            "it must be a list of non-empty strings"
        )
    for position, text in enumerate(value):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"{where}: field 'rephrasings' item {position} is {text!r}; "
                "every rephrasing must be a non-empty string — drop invalid ones"
            )
    return list(value)


def normalize_row(row: dict, index: int, source: str, *, gold: bool = True, environment: bool = False,
                  keep_row: bool = False) -> dict:
    """Return `row` in the rlvr row format; ValueError naming row, field and fix on bad input. ``gold=False``
    (rewards that read no gold): a row without a gold column gets ``answer`` None. ``environment``
    (environment_factory): the prompt may be missing or empty, and the row as given is kept (``DATASET_ROW``);
    ``keep_row`` (a TRL config: its reward functions get the dataset's columns as given): the row is kept too."""
    if not isinstance(row, dict):
        raise ValueError(
            f"row {index} of {source} is a {type(row).__name__} ({row!r:.80}); every row must be an object "
            "(dict) with at least a prompt and a gold answer"
        )
    row_id = _explicit_id(row, index, source)
    where = _where(index, source, row_id)
    prompt = _prompt(row, where, environment=environment)
    answer, solution, gold_field = _answer_and_solution(row, where, gold)
    rephrasings = _rephrasings(row, where)

    normalized: dict[str, Any] = {
        "id": row_id if row_id is not None else f"{source}#{index}",
        "prompt": prompt,
        "answer": answer,
    }
    if solution is not None:
        normalized["solution"] = solution
    elif gold_field == "solution":
        normalized[GOLD_ONLY_SOLUTION] = row["solution"]  # a bare answer: no expert text, but reward
        # functions written for TRL datasets read it as their `solution` column (rewarding.reward_columns)
    if rephrasings is not None:
        normalized["rephrasings"] = rephrasings
    if environment or keep_row:
        normalized[DATASET_ROW] = dict(row)
    # Optional fields are present only when usable: a null column, or a bare-answer `solution`
    # consumed as the gold (it is not a solution text), is dropped.
    for key, value in row.items():
        if key not in normalized and key not in OPTIONAL_FIELDS:
            normalized[key] = value
    return normalized


def select_prompt_column(rows: list[dict], column: str, source: str) -> list[dict]:
    """Rows whose prompt is taken from ``column`` (open-r1's ``dataset_prompt_column``) instead of the first of
    prompt / question / problem; ValueError naming the first row without it."""
    out = []
    for index, row in enumerate(rows):
        if column not in row:
            raise ValueError(f"{_where(index, source, row.get('id'))}: dataset_prompt_column={column!r} is not one of its "
                             f"columns {sorted(k for k in row if k not in INTERNAL_FIELDS)}; name the question's column")
        out.append({**row, "prompt": _prompt({column: row[column]}, _where(index, source, row.get("id")))})
    return out


def as_chat(rows: list[dict], system_prompt: str | None) -> list[dict]:
    """Plain-string prompts as the chat open-r1's grpo.py builds (``make_conversation``): [system?, user].

    Chat prompts are left as they are (open-r1 would nest them in a user message; a chat is already one).
    """
    def chat(prompt: str) -> list[dict]:
        system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
        return [*system, {"role": "user", "content": prompt}]

    return [{**row, "prompt": chat(row["prompt"])} if isinstance(row["prompt"], str) else row for row in rows]


def normalize_rows(rows: Iterable[dict], source: str, *, gold: bool = True, environment: bool = False,
                   keep_row: bool = False) -> list[dict]:
    """Normalize every row (``gold``, ``environment``, ``keep_row``: normalize_row's); reject an empty dataset and
    duplicate ids (naming both rows)."""
    normalized: list[dict] = []
    first_index_of: dict[str, int] = {}
    for index, row in enumerate(rows):
        out = normalize_row(row, index, source, gold=gold, environment=environment, keep_row=keep_row)
        if out["id"] in first_index_of:
            raise ValueError(
                f"rows {first_index_of[out['id']]} and {index} of {source} share id {out['id']!r}; "
                "ids must be unique — fix them or drop the 'id' column to number rows by position"
            )
        first_index_of[out["id"]] = index
        normalized.append(out)
    if not normalized:
        raise ValueError(f"{source} has no rows; give a dataset with at least one prompt and gold answer")
    return normalized
