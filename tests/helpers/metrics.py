"""What of a metrics.jsonl line two runs of the same training must agree on: everything but timings and memory."""

from __future__ import annotations

TIMING_PREFIXES = ("time/", "perf/", "memory/")
TIMING_KEYS = ("step_time",)  # TRL's name for the seconds per optimiser step


def comparable(line: dict) -> dict:
    """``line`` without its wall-clock and memory keys."""
    return {k: v for k, v in line.items() if not k.startswith(TIMING_PREFIXES) and k not in TIMING_KEYS}
