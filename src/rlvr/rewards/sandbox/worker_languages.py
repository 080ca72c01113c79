"""The languages the sandbox runs: one table, :data:`LANGUAGES`, name -> :class:`Language` (its runner per
kind of job, the executable it needs, its contract samples). Standard library only, no sibling import: the
worker loads it by its top-level name (``worker_program`` imports ``worker_languages``) and ``pool.py`` as
``rlvr.rewards.sandbox.worker_languages``, so a job's language picks its runner from the same entry whose name
``Job`` accepts. A language without an entry is refused when its ``Job`` is made (pool.py).

A runner is ``runner(job, nonce) -> exit code``, called in the program's process (its folder is the working
directory, its streams are the job's, its limits and seccomp filter are set): it runs the program there, or
becomes it (``os.execv``), or writes ``nonce`` + a result on fd 3 (``checked``: the test code ran to its end).

Every entry's ``sample`` reads ``SAMPLE_STDIN`` ("2 40") and prints ``SAMPLE_STDOUT`` ("42"); its ``failing``
program exits non-zero. tests/contracts/test_language_contract.py runs both through a pool for every entry,
and another language's sample as this one (it must not print 42: a language dispatched to the wrong runner).
docs/design/architecture.md, "Add a sandbox language", is the checklist.
"""

import json
import os
import shutil
import sys
import traceback  # imported here, once: a program's process is forked with it loaded
from dataclasses import dataclass

SAMPLE_STDIN = "2 40\n"
SAMPLE_STDOUT = "42\n"


@dataclass(frozen=True)
class Language:
    """A language the sandbox runs.

    Args:
        runners: kind of job -> runner (``script``: the program on stdin -> stdout; python has more kinds).
        toolchain: the executable its runner needs in the programs' root (None: the worker's own Python).
        sample: a program that reads two integers from stdin and prints their sum.
        failing: a program that fails (exits non-zero: a compile error, an uncaught error).
        description: one line for the docs.
    """

    runners: dict
    toolchain: str | None
    sample: str
    failing: str
    description: str


# ---- runners -------------------------------------------------------------------------------------------------

def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # a program may close or replace its streams
            stream.flush()
        except Exception:  # noqa: BLE001, S110
            pass


def _exec_main(source: str) -> tuple[int, bool]:
    """Run ``source`` as ``python -c`` would: its exit code (1 and a traceback on an uncaught exception), and
    whether it ran to its end (not stopped by SystemExit or an exception)."""
    try:
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102  (the point, in the sandbox)
    except SystemExit as stop:
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        _flush()
        return code or 0, False
    except BaseException as error:  # noqa: BLE001  (the program's own exceptions: its exit status)
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)  # from the program's frame
        _flush()
        return 1, False
    _flush()
    return 0, True


def _run_script(job: dict, nonce: str) -> int:
    return _exec_main(job["source"])[0]


def _run_checked(job: dict, nonce: str) -> int:
    """The program, then its tests; the nonce goes out on fd 3 only if the tests ran to their end."""
    write = os.write  # as it was before the program could replace it
    code, finished = _exec_main(job["source"] + "\n\n" + job["test"] + "\n")
    if finished:
        write(3, nonce.encode())
    return code


def _run_verl_apps(job: dict, nonce: str) -> int:
    """verl's ``prime_code`` test runner (``run_test``, loaded from its file) on the program; results on fd 3."""
    import importlib.util

    write, leave = os.write, os._exit  # verl's reliability_guard sets many os functions to None
    spec = importlib.util.spec_from_file_location("_verl_testing_util", job["runner_path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    devnull = open(os.devnull, "w")  # noqa: SIM115  (the process's streams until it exits)
    sys.stdout = sys.stderr = devnull  # as verl's _temp_run does
    try:
        results, _ = module.run_test(in_outs=job["in_outs"], test=job["source"], debug=False, timeout=job["timeout"])
        results = [r if isinstance(r, bool) else int(r) if isinstance(r, int) else str(r) for r in results]
    except Exception:  # noqa: BLE001  (verl's _temp_run: every case failed)
        results = [-1] * len(job["in_outs"]["inputs"])
    write(3, (nonce + json.dumps(results)).encode())
    leave(0)


def _run_cpp(job: dict, nonce: str) -> int:
    """Compile the program with g++ in its folder (the same limits, its own processes), then become the binary."""
    import subprocess

    with open("main.cpp", "w") as source:
        source.write(job["source"])
    compiler = shutil.which("g++")
    if compiler is None:
        print("g++ is not installed", file=sys.stderr)
        return 127
    compiled = subprocess.run([compiler, "-O2", "-std=c++17", "-o", "main", "main.cpp"], stdin=subprocess.DEVNULL,
                              capture_output=True, check=False)
    if compiled.returncode != 0:
        sys.stderr.write(compiled.stderr.decode("utf-8", "replace")[-4000:])
        _flush()
        return 1
    os.execv("./main", ["./main"])  # stdin, stdout and stderr are the job's already


# ---- the table -----------------------------------------------------------------------------------------------

LANGUAGES = {
    "python": Language(
        runners={"script": _run_script, "checked": _run_checked, "verl_apps": _run_verl_apps},
        toolchain=None,
        sample="a, b = map(int, input().split())\nprint(a + b)\n",
        failing="raise ValueError('this program fails')\n",
        description="run by the worker's own Python as `python -c` would (script), then its tests (checked), "
                    "or by verl's APPS runner (verl_apps)",
    ),
    "cpp": Language(
        runners={"script": _run_cpp},
        toolchain="g++",
        sample="#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<std::endl;}\n",
        failing="int main( {\n",
        description="compiled by g++ -O2 -std=c++17 in the program's folder (same limits), then the process "
                    "becomes the binary",
    ),
}
