"""rlvr's CPU thread set-up: OpenMP threads that sleep instead of spinning while they wait.

torch's CPU kernels run on OpenMP (libgomp). Between parallel regions libgomp's worker threads
spin-wait for ~300 000 iterations before sleeping, so a process keeps both cores of a small machine
busy even while one thread waits for the other. Beside another busy process this goes badly: a
parallel region finishes only when its slowest thread does, a thread descheduled by the other
process holds up the rest, and the spinning threads burn the time slices the other process (and
the descheduled thread) needed. Measured on the 2-core development VM (docs/performance.md,
"A busy machine"): beside one 2-thread torch matmul loop, a decoding-sized forward of SmolLM2 took
9.7x its idle time with libgomp's default, 2.0x with ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at
once), for an idle cost of ~5-10 %.

So rlvr sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user chose a policy (``OMP_WAIT_POLICY`` or
``GOMP_SPINCOUNT`` set: theirs is kept; ``OMP_WAIT_POLICY=ACTIVE`` restores spinning). libgomp
reads it once, when it is loaded, i.e. when torch is first imported: :func:`apply` runs when the
``rlvr`` package is imported (the ``rlvr`` command always does this before torch); a program that
imports torch before rlvr keeps libgomp's default, and :func:`applied` says so.
"""

from __future__ import annotations

import os
import sys

WAIT_POLICY = "PASSIVE"
USER_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_state = {"set_by_rlvr": False, "torch_was_loaded": False}


def apply() -> None:
    """Set OMP_WAIT_POLICY=PASSIVE for this process and its children unless the user chose one."""
    _state["torch_was_loaded"] = "torch" in sys.modules
    if any(name in os.environ for name in USER_CHOICES):
        return
    os.environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    _state["set_by_rlvr"] = True


def applied() -> str:
    """One line for logs: which wait policy this process's OpenMP threads use, and why."""
    if _state["torch_was_loaded"]:
        return "OpenMP wait policy: libgomp's default (torch was imported before rlvr)"
    if _state["set_by_rlvr"]:
        return f"OpenMP wait policy: {WAIT_POLICY} (rlvr's default; OMP_WAIT_POLICY=ACTIVE restores spinning)"
    chosen = ", ".join(f"{name}={os.environ[name]}" for name in USER_CHOICES if name in os.environ)
    return f"OpenMP wait policy: the user's ({chosen})"


def environ_as_given() -> dict[str, str]:
    """The environment as the user gave it, for a process that imports rlvr again (``rlvr train``'s training
    process): without rlvr's own OMP_WAIT_POLICY, which that process sets and names as rlvr's."""
    env = dict(os.environ)
    if _state["set_by_rlvr"]:
        env.pop("OMP_WAIT_POLICY", None)
    return env
