"""The exception a run stops with when it cannot go on (the CLI prints it in one line, exit code 3)."""


class TrainingStopped(RuntimeError):
    """The run cannot go on: every recent optimiser step was non-finite, a reward function keeps
    failing, ... The message names the cause and the fix."""
