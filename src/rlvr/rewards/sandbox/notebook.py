"""The built-in ``python`` tool: a model's code run in the sandbox with a notebook's semantics.

Within one trajectory, variables persist from call to call, as in a notebook: each call runs in a fresh sandboxed
process (``rlvr.rewards.sandbox``: its limits, no network, nothing of other jobs), which first re-runs the
trajectory's earlier cells with their output discarded (their errors ignored, as a notebook keeps what ran
before an error), then the new cell. Nothing is shared between trajectories, and nothing outlives a call. The
result the model is shown: the cell's stdout and stderr, then the value of a final expression (``2 ** 100`` on
its own line shows ``1267650600228229401496703205376``, as a notebook shows it), or the exception's last line
(``NameError: name 'x' is not defined``), a timeout or a crash said in one line; cut to ``output_chars``
characters (the head and the tail kept).

Convention: state is rebuilt by replay, so a cell that draws random numbers or reads the clock gives another
value when replayed; the time of a call grows with the trajectory's earlier cells (at most
``max_tool_calling_iterations`` of them).
"""

from __future__ import annotations

import json
import signal

from rlvr.rewards.sandbox.pool import Job, SandboxLimits, shared_pool

TOOL_LIMITS = SandboxLimits(cpu_s=5, wall_s=10)  # a call, replay included (a code reward's case: the same)
OUTPUT_CHARS = 1024

# The program a call runs: the earlier cells silently, then the new one with a notebook's display of its final
# expression. ``__CELLS__`` is replaced by the cells as a JSON string literal (never by code).
PROGRAM = '''
import ast, contextlib, io, json, sys, traceback
cells = json.loads(__CELLS__)
scope = {"__name__": "__main__"}
for cell in cells[:-1]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(cell, "<cell>", "exec"), scope)
        except BaseException:
            pass
try:
    tree = ast.parse(cells[-1], "<cell>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), scope)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), scope)
        if value is not None:
            print(repr(value))
except SystemExit:
    pass
except BaseException as error:
    sys.stdout.flush()
    print("".join(traceback.format_exception_only(type(error), error)).strip())
    sys.exit(1)
'''


class PythonNotebook:
    """The ``python`` tool's cells run in the sandbox; a round's calls run in parallel."""

    name = "python"

    def __init__(self, sandbox: str = "namespaces", *, limits: SandboxLimits = TOOL_LIMITS,
                 output_chars: int = OUTPUT_CHARS, workers: int | None = None):
        self.sandbox, self.limits, self.output_chars = sandbox, limits, output_chars
        self.workers = workers  # the sandbox pool's (None: shared_pool's default, as code rewards use)

    def run_cells(self, requests: list[tuple[list[str], str]]) -> list[tuple[str, bool]]:
        """For each (the trajectory's earlier cells, the new cell): (what the model is shown, whether it failed)."""
        jobs = [Job(PROGRAM.replace("__CELLS__", repr(json.dumps([*earlier, cell]))), limits=self.limits)
                for earlier, cell in requests]
        return [self._result(outcome) for outcome in shared_pool(self.sandbox, self.workers).run_many(jobs)]

    def _result(self, outcome) -> tuple[str, bool]:
        if outcome.sandbox_error:
            return "Error: the sandbox failed to run the cell", True
        text = outcome.stdout + outcome.stderr
        if outcome.timed_out:
            text += f"TimeoutError: the cell ran past {self.limits.wall_s:g} s\n"
        elif outcome.output_truncated:
            text += "Error: the cell printed more than the sandbox keeps\n"
        elif outcome.signal in (signal.SIGXCPU, signal.SIGKILL):
            text += f"TimeoutError: the cell used its {self.limits.cpu_s:g} s of CPU\n"
        elif outcome.exit_code != 0 and not outcome.stdout.strip() and not outcome.stderr.strip():
            text += f"Error: the cell's process ended with {outcome.signal and f'signal {outcome.signal}' or outcome.exit_code}\n"
        return self._cut(text), not outcome.ok

    def _cut(self, text: str) -> str:
        if len(text) <= self.output_chars:
            return text
        half = self.output_chars // 2
        return f"{text[:half]}\n... ({len(text) - 2 * half} characters cut) ...\n{text[-half:]}"
