"""The sandbox-language contract, checked for every language in the table (worker_languages.LANGUAGES).

For each language, through a real sandbox pool: its ``sample`` reads "2 40" and prints "42"; its ``failing``
program is reported as the program's failure (a non-zero exit code, no sandbox error, the worker still
serving), not as a crash of the sandbox; and every other language's sample, submitted as this language, does
not print "42" — a language dispatched to another language's runner fails here. A language whose toolchain
(e.g. g++) is not installed is skipped, naming it. ``Job`` refuses a language or a kind without a runner.
A language added to the table is checked here with nothing to edit in this file (docs/design/architecture.md,
"Add a sandbox language").
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlvr.rewards.sandbox import Job, SandboxLimits, SandboxPool
from rlvr.rewards.sandbox import pool as pool_module
from rlvr.rewards.sandbox.worker_languages import LANGUAGES, SAMPLE_STDIN, SAMPLE_STDOUT

LIMITS = SandboxLimits(cpu_s=10, wall_s=30)  # a compiler's run is part of the program's
SANDBOX = Path(pool_module.__file__).parent


@pytest.fixture(scope="module")
def pool():
    with SandboxPool("namespaces", workers=1) as sandbox:
        yield sandbox


def _needs_toolchain(name: str) -> None:
    toolchain = LANGUAGES[name].toolchain
    if toolchain is not None and shutil.which(toolchain) is None:
        pytest.skip(f"{toolchain} is not installed here: the {name} runner needs it")


def _run(pool: SandboxPool, source: str, name: str):
    return pool.run(Job(source, stdin=SAMPLE_STDIN, language=name, limits=LIMITS))


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_a_languages_sample_prints_the_expected_output(pool, name):
    _needs_toolchain(name)
    outcome = _run(pool, LANGUAGES[name].sample, name)
    assert outcome.ok and outcome.stdout == SAMPLE_STDOUT, (
        f"the {name} sample, run as {name}, printed {outcome.stdout!r} (expected {SAMPLE_STDOUT!r}; exit code "
        f"{outcome.exit_code}, sandbox error {outcome.sandbox_error!r}); stderr: {outcome.stderr[-600:]}")


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_a_languages_failing_program_is_a_failure_not_a_crash(pool, name):
    _needs_toolchain(name)
    outcome = _run(pool, LANGUAGES[name].failing, name)
    assert outcome.sandbox_error is None, f"the {name} failing program broke the sandbox: {outcome.sandbox_error}"
    assert not outcome.ok and outcome.exit_code not in (None, 0) and not outcome.timed_out, (
        f"the {name} failing program was not reported as a failure: exit code {outcome.exit_code}, signal "
        f"{outcome.signal}, timed out {outcome.timed_out}; stdout {outcome.stdout!r}")
    assert _run(pool, LANGUAGES["python"].sample, "python").stdout == SAMPLE_STDOUT  # the worker still serves


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_another_languages_program_fails_in_a_languages_runner(pool, name):
    """What catches a language dispatched to another language's runner (its own sample may pass there too)."""
    _needs_toolchain(name)
    for other, language in LANGUAGES.items():
        if other == name:
            continue
        outcome = _run(pool, language.sample, name)
        assert outcome.stdout != SAMPLE_STDOUT, (
            f"the {other} sample, submitted as {name}, printed {SAMPLE_STDOUT!r}: the {name} language runs "
            f"{other} programs (is its entry in worker_languages.LANGUAGES pointing at the {other} runner?)")


def test_every_language_runs_scripts_and_declares_its_samples():
    for name, language in LANGUAGES.items():
        assert "script" in language.runners, f"{name}: every language runs a 'script' job (stdin -> stdout)"
        assert language.sample.strip() and language.failing.strip() and language.description.strip(), name
        assert language.sample != language.failing, name


def test_the_pool_validates_against_the_workers_table_and_nothing_compares_a_language():
    assert pool_module.LANGUAGES is LANGUAGES
    for file in ("worker.py", "worker_program.py", "pool.py"):
        text = (SANDBOX / file).read_text(encoding="utf-8")
        named = [name for name in LANGUAGES if name != "python" and f'"{name}"' in text]
        assert not named, f"{file} names the language(s) {named}: dispatch through worker_languages.LANGUAGES"


def test_a_language_or_kind_without_a_runner_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError) as raised:
        Job("echo hi", language="no-such-language")
    message = str(raised.value)
    assert f"the sandbox runs {', '.join(LANGUAGES)} programs, not 'no-such-language'" in message
    assert "worker_languages.py" in message and "Add a sandbox language" in message and "\n" not in message
    for name, language in LANGUAGES.items():
        with pytest.raises(ValueError, match=f"a {name} program runs as .*'script'.*, not 'no-such-kind'"):
            Job("x", language=name, kind="no-such-kind")
        for kind in language.runners:
            Job("x", language=name, kind=kind)
