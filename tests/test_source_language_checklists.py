"""docs/design/architecture.md's "Add a dataset source" and "Add a sandbox language", each followed literally in a
fresh copy of the package (tests/helpers/package_copy.py), run by a fresh interpreter: a toy source
(``toy-squares``: eight rows "What is k squared?") trained on for one step from the command line, and a toy
language (``bash``, the programs' root binds the system's /usr and /bin, so bash is there) whose sample runs
through the pool; each addition then passes its contract suite. The unedited package refuses both names.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from tests.helpers.package_copy import append, copy_env, copy_package, failed_tests, plant, run_tests_on_copy

# "Add a dataset source", step 1: the loader, in a module of data/ (rows through normalize_rows)
TOY_SOURCE_MODULE = '''"""``toy-squares``: eight rows "What is k squared?" (k = 1..8), the answer k*k (tests only)."""

from rlvr.data.rows import normalize_rows

TOY_SQUARES_NAME = "toy-squares"


def load_toy_squares(spec: str, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    rows = [{"id": f"{TOY_SQUARES_NAME}#{k}", "prompt": f"What is {k} squared?", "answer": str(k * k)}
            for k in range(1, 9)]
    return normalize_rows(rows, TOY_SQUARES_NAME, gold=gold, environment=environment, keep_row=keep_row)
'''
# step 2: one more Source in BUILTIN_SOURCES (data/sources.py), its loader imported there
TOY_SOURCE_IMPORT = "from rlvr.data.toy_squares import TOY_SQUARES_NAME, load_toy_squares\n"
TOY_SOURCE_ENTRY = '''    Source(TOY_SQUARES_NAME, load_toy_squares, f"'{TOY_SQUARES_NAME}'", "eight rows: k squared, k = 1..8 (tests only)",
           example=TOY_SQUARES_NAME),
'''
# "Add a sandbox language", steps 1 and 2: the runner and its entry, in worker_languages.py
TOY_LANGUAGE = '''

def _run_bash(job: dict, nonce: str) -> int:
    """Write the program to main.sh in its folder, then become bash running it."""
    with open("main.sh", "w") as source:
        source.write(job["source"])
    shell = shutil.which("bash")
    if shell is None:
        print("bash is not installed", file=sys.stderr)
        return 127
    os.execv(shell, ["bash", "main.sh"])


LANGUAGES["bash"] = Language(
    runners={"script": _run_bash},
    toolchain="bash",
    sample="read a b\\necho $((a + b))\\n",
    failing="echo failing >&2\\nexit 3\\n",
    description="run by bash from main.sh in the program's folder",
)
'''
TINY_RUN = {"model": "tiny-random", "max_steps": 1, "prompts_per_step": 2, "num_generations": 4,
            "max_completion_length": 8, "progress_bar": False, "verifier_workers": 1, "num_completions_to_log": 8}
DOCS_TABLE_TEST = "tests/contracts/test_source_contract.py::test_the_docs_table_is_the_registrys"


def _python(src: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=copy_env(src), capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.slow
def test_add_a_dataset_source_in_a_copy_of_the_package(tmp_path):
    """Steps 1-2 as written; step 3: ``data=toy-squares`` trains one step from the command line; step 4 skipped on
    purpose: the docs table test fails, naming the missing line; every other contract test passes."""
    src = copy_package(tmp_path)
    (src / "rlvr" / "data" / "toy_squares.py").write_text(TOY_SOURCE_MODULE)
    plant(src, "data/sources.py", "from rlvr.data.tool_tasks import TOOL_TASKS_NAME, load_tool_tasks\n",
          "from rlvr.data.tool_tasks import TOOL_TASKS_NAME, load_tool_tasks\n" + TOY_SOURCE_IMPORT)
    plant(src, "data/sources.py", "BUILTIN_SOURCES = (\n", "BUILTIN_SOURCES = (\n" + TOY_SOURCE_ENTRY)
    command = [sys.executable, "-m", "rlvr.cli", "train", "data=toy-squares", f"output_dir={tmp_path / 'run'}",
               *(f"{k}={v}" for k, v in TINY_RUN.items())]
    done = subprocess.run(command, cwd=tmp_path, env=copy_env(src), capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines() if line]
    assert len(records) == 8 and all(r["id"].startswith("toy-squares#") for r in records)
    for r in records:
        k = int(re.search(r"What is (\d+) squared\?", json.dumps(r["prompt"])).group(1))
        assert r["answer"] == str(k * k)
    suite = run_tests_on_copy(src, "tests/contracts/test_source_contract.py", "--deselect", DOCS_TABLE_TEST, "-vv")
    assert suite.returncode == 0 and "[toy-squares] PASSED" in suite.stdout, suite.stdout[-3000:]
    docs = run_tests_on_copy(src, DOCS_TABLE_TEST)
    assert failed_tests(docs) == [DOCS_TABLE_TEST]
    assert "| `toy-squares` | name | 'toy-squares' | eight rows: k squared, k = 1..8 (tests only) |" in docs.stdout
    unedited = _python(Path(rlvr.__file__).parents[1], "from rlvr.data import load_rows; load_rows('toy-squares')",
                       tmp_path)
    assert unedited.returncode != 0 and "is not a known source" in unedited.stderr


@pytest.mark.slow
def test_add_a_sandbox_language_in_a_copy_of_the_package(tmp_path):
    """Steps 1-2 as written (bash's runner and entry appended to worker_languages.py); its sample runs through the
    pool of the copy, and the language contract suite passes for it (sample, failing program, others' programs)."""
    src = copy_package(tmp_path)
    append(src, "rewards/sandbox/worker_languages.py", TOY_LANGUAGE)
    run = ("from rlvr.rewards.sandbox import Job, SandboxPool\n"
           "with SandboxPool('namespaces', workers=1) as pool:\n"
           "    outcome = pool.run(Job('read a b\\necho $((a + b))\\n', stdin='2 40\\n', language='bash'))\n"
           "print(repr(outcome.stdout), outcome.exit_code, outcome.sandbox_error)\n")
    done = _python(src, run, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "'42\\n' 0 None", done.stderr[-3000:]
    suite = run_tests_on_copy(src, "tests/contracts/test_language_contract.py", "-vv")
    assert suite.returncode == 0, suite.stdout[-3000:]
    for test in ("sample_prints_the_expected_output", "failing_program_is_a_failure_not_a_crash",
                 "another_languages_program_fails_in_a_languages_runner"):
        assert f"{test}[bash] PASSED" in suite.stdout, suite.stdout[-3000:]
    unedited = _python(Path(rlvr.__file__).parents[1], run, tmp_path)
    assert unedited.returncode != 0 and "the sandbox runs python, cpp programs, not 'bash'" in unedited.stderr
