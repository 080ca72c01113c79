"""The source and language contract suites catch a plausible one-line bug, planted in a copy of the package
(tests/helpers/package_copy.py): the suite fails, naming the source or the language."""

from __future__ import annotations

import pytest

from tests.helpers.package_copy import copy_package, failed_tests, plant, run_tests_on_copy

LANGUAGE_SUITE = "tests/contracts/test_language_contract.py"
SOURCE_SUITE = "tests/contracts/test_source_contract.py"


@pytest.mark.slow
def test_a_language_dispatched_to_another_languages_runner_fails_the_language_suite_naming_it(tmp_path):
    """cpp's entry points at the python runner: a C++ program would run as Python (the bug a contributor's bash
    met when the worker picked runners by ``"cpp" if ... else kind``)."""
    src = copy_package(tmp_path)
    plant(src, "rewards/sandbox/worker_languages.py", 'runners={"script": _run_cpp}', 'runners={"script": _run_script}')
    done = run_tests_on_copy(src, LANGUAGE_SUITE)
    assert done.returncode != 0, done.stdout[-3000:]
    assert failed_tests(done) == [f"{LANGUAGE_SUITE}::test_a_languages_sample_prints_the_expected_output[cpp]"], \
        done.stdout[-3000:]
    assert "the cpp sample, run as cpp, printed ''" in done.stdout and "SyntaxError" in done.stdout


@pytest.mark.slow
def test_a_source_whose_rows_lose_their_prompt_fails_the_source_suite_naming_it(tmp_path):
    """tool-tasks' loader drops the prompt of its normalized rows."""
    src = copy_package(tmp_path)
    plant(src, "data/tool_tasks.py", "    return normalize_rows(rows, TOOL_TASKS_NAME)",
          '    return [{k: v for k, v in row.items() if k != "prompt"} for row in normalize_rows(rows, TOOL_TASKS_NAME)]')
    done = run_tests_on_copy(src, SOURCE_SUITE)
    assert done.returncode != 0, done.stdout[-3000:]
    test = "test_a_source_gives_rows_with_a_prompt_a_unique_id_and_its_gold"
    assert failed_tests(done) == [f"{SOURCE_SUITE}::{test}[tool-tasks]"], done.stdout[-3000:]
    assert "source 'tool-tasks' (tool-tasks): row 0 (id 'tool-tasks#0') has no prompt (prompt is None)" in done.stdout
