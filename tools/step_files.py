"""Which files of rlvr one training step enters, measured with a profiler hook.

    python tools/step_files.py                 # grpo, dagrpo, tagrpo: the counts and the file lists
    python tools/step_files.py --json out.json

Builds a tiny run (``tiny-random``, 4 prompts x 4 responses) per algorithm, runs its first step
untraced (first-call imports and caches), then traces the second ``Trainer.training_step`` with
``sys.setprofile``: every Python function of ``src/rlvr`` that runs counts its file. Every thread counts:
the hook is given to each thread started from the run's set-up on (``threading.setprofile`` before the
trainer is built: the reward pool's, the rollout thread of async generation, a verifier's), and records only
while the traced step runs. Reported per algorithm:

- ``entered``: every file of rlvr that ran during the step, in any thread;
- ``reader``: the files of ``training_step`` and of the functions it calls itself (call depth <= 1:
  the phases) — what a reader opens to follow the step; ``reader_depth2`` adds what those call;
- ``loss_path``: the files on the call path from ``training_step`` to the loss (``rlvr.core.losses.policy_loss``),
  in call order, and ``loss_calls``: that path as ``file::function``;
- for DaGRPO and TA-GRPO, the files they enter that a GRPO step does not.

What it cannot see: calls in other processes (a verifier's worker processes, a vLLM server) and code that is
not Python (torch's kernels); threads started before the set-up (none of rlvr's).

The limits (issue 31: entered <= 20 (issue 51), reader <= 8, each variant adds <= 3; issue 43: the loss
path) are checked by ``tests/test_step_files.py``; this script prints the lists so a change that adds one is
easy to find.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

import rlvr

SRC = Path(rlvr.__file__).resolve().parent
READER_DEPTH = 1  # the step and the functions it calls
LOSS_FILE, LOSS_FUNCTION = "rlvr/core/losses.py", "policy_loss"  # the loss: the end of the path measured
ALGOS = {
    "grpo": {"algo": "grpo", "beta": 0.04},
    "dagrpo": {"algo": "dagrpo"},
    "tagrpo": {"algo": "tagrpo", "num_rephrasings": 2},
}


def _tiny(output_dir: Path, **extra) -> dict:
    return {"model": "tiny-random", "data": "rg:basic_arithmetic:size=64", "max_steps": 2, "prompts_per_step": 4,
            "num_generations": 4, "max_completion_length": 12, "output_dir": str(output_dir),
            "progress_bar": False, "verifier_workers": 1, "save_strategy": "no", **extra}


class StepTrace:
    """Collects the rlvr files whose functions run, and the depth below ``training_step`` of each call."""

    def __init__(self):
        self.entered: set[str] = set()
        self.reader: set[str] = set()
        self.reader_depth2: set[str] = set()
        self.loss_calls: list[str] | None = None  # file::function from training_step to the loss, once found
        self.active = False  # recording (the traced step runs)
        self._depth: dict[int, int] = {}  # thread -> frames below training_step (main thread only)

    def install(self) -> None:
        """At set-up: every thread started from now on runs the hook (it records only while ``active``)."""
        threading.setprofile(self.hook)

    def start(self) -> None:
        self._depth.clear()
        self.active = True
        sys.setprofile(self.hook)

    def stop(self) -> None:
        sys.setprofile(None)
        self.active = False

    def uninstall(self) -> None:
        threading.setprofile(None)

    def _loss_path(self, frame) -> list[str]:
        """file::function of each rlvr frame from ``training_step`` down to ``frame``."""
        calls = []
        while frame is not None:
            name = self._name(frame)
            if name is not None:
                calls.append(f"{name}::{frame.f_code.co_name}")
            if frame.f_code.co_name == "training_step":
                break
            frame = frame.f_back
        return calls[::-1]

    def _name(self, frame) -> str | None:
        path = Path(frame.f_code.co_filename)
        try:
            return str(path.resolve().relative_to(SRC.parent))
        except ValueError:
            return None

    def hook(self, frame, event, arg):
        if not self.active or event not in ("call", "return"):
            return
        name = self._name(frame)
        main = threading.get_ident() == threading.main_thread().ident
        if event == "call":
            depth = self._depth.get(id(frame.f_back), -1) + 1 if main else None
            if main:
                self._depth[id(frame)] = depth if frame.f_code.co_name != "training_step" or depth > 0 else 0
            if name is not None:
                self.entered.add(name)
                if (main and self.loss_calls is None and name == LOSS_FILE
                        and frame.f_code.co_name == LOSS_FUNCTION):
                    self.loss_calls = self._loss_path(frame)
                if main and self._depth[id(frame)] <= READER_DEPTH:
                    self.reader.add(name)
                if main and self._depth[id(frame)] <= READER_DEPTH + 1:
                    self.reader_depth2.add(name)
        elif main:
            self._depth.pop(id(frame), None)


def trace_step(algo: str, overrides: dict, folder: Path) -> dict:
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    trace = StepTrace()
    trace.install()  # before the set-up: every thread the run starts is traced
    try:
        trainer = Trainer(build_config(_tiny(folder / algo, **overrides)))
        trainer._start()
        trainer.training_step(1)  # first-call work (imports, caches) is not the step
        trace.start()
        try:
            trainer.training_step(2)
        finally:
            trace.stop()
        trainer.generation.close()
        trainer.rewarder.close()
        if trainer.lock is not None:
            trainer.lock.release()
    finally:
        trace.uninstall()
    loss_calls = trace.loss_calls or []
    return {"entered": sorted(trace.entered), "reader": sorted(trace.reader),
            "reader_depth2": sorted(trace.reader_depth2), "loss_calls": loss_calls,
            "loss_path": list(dict.fromkeys(call.split("::")[0] for call in loss_calls))}


def measure(algos=ALGOS) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = {name: trace_step(name, overrides, Path(tmp)) for name, overrides in algos.items()}
    base = set(out["grpo"]["entered"]) if "grpo" in out else set()
    for name, files in out.items():
        if name != "grpo":
            files["added"] = sorted(set(files["entered"]) - base)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the lists to this file")
    args = parser.parse_args(argv)
    result = measure()
    for name, files in result.items():
        print(f"{name}: enters {len(files['entered'])} files, a reader follows {len(files['reader'])} "
              f"({len(files['reader_depth2'])} one call deeper)"
              + (f", adds {len(files['added'])} to grpo's" if "added" in files else "")
              + f"; the loss is {len(files['loss_path'])} files below training_step's")
        for key in ("reader", "reader_depth2", "loss_path", "added", "entered"):
            if key in files:
                print(f"  {key}: {', '.join(files[key])}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
