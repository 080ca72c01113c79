"""Which files of rlvr one training step enters, measured with a profiler hook.

    python tools/step_files.py                 # grpo, dagrpo, tagrpo: the counts and the file lists
    python tools/step_files.py --json out.json

Builds a tiny run (``tiny-random``, 4 prompts x 4 responses) per algorithm, runs its first step
untraced (first-call imports and caches), then traces the second ``Trainer.training_step`` with
``sys.setprofile`` (and ``threading.setprofile`` for the reward threads): every Python function of
``src/rlvr`` that runs counts its file. Reported per algorithm:

- ``entered``: every file of rlvr that ran during the step;
- ``reader``: the files of ``training_step`` and of the functions it calls itself (call depth <= 1:
  the phases) — what a reader opens to follow the step; ``reader_depth2`` adds what those call;
- for DaGRPO and TA-GRPO, the files they enter that a GRPO step does not.

The limits (issue 31: entered <= 21 since issue 38, reader <= 8, each variant adds <= 3) are checked by
``tests/test_step_files.py``; this script prints the lists so a change that adds one is easy to find.
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
        self._depth: dict[int, int] = {}  # thread -> frames below training_step (main thread only)

    def _name(self, frame) -> str | None:
        path = Path(frame.f_code.co_filename)
        try:
            return str(path.resolve().relative_to(SRC.parent))
        except ValueError:
            return None

    def hook(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        name = self._name(frame)
        main = threading.get_ident() == threading.main_thread().ident
        if event == "call":
            depth = self._depth.get(id(frame.f_back), -1) + 1 if main else None
            if main:
                self._depth[id(frame)] = depth if frame.f_code.co_name != "training_step" or depth > 0 else 0
            if name is not None:
                self.entered.add(name)
                if main and self._depth[id(frame)] <= READER_DEPTH:
                    self.reader.add(name)
                if main and self._depth[id(frame)] <= READER_DEPTH + 1:
                    self.reader_depth2.add(name)
        elif main:
            self._depth.pop(id(frame), None)


def trace_step(algo: str, overrides: dict, folder: Path) -> dict:
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    trainer = Trainer(build_config(_tiny(folder / algo, **overrides)))
    trainer._start()
    trainer.training_step(1)  # first-call work (imports, caches) is not the step
    trace = StepTrace()
    step = trainer.training_step

    def traced(step_number):
        trace._depth.clear()
        frame = sys._getframe()
        trace._depth[id(frame)] = -1  # training_step (called from here) is depth 0
        threading.setprofile(trace.hook)
        sys.setprofile(trace.hook)
        try:
            return step(step_number)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)

    traced(2)
    trainer.rollouts.close()
    trainer.rewarder.close()
    if trainer.lock is not None:
        trainer.lock.release()
    return {"entered": sorted(trace.entered), "reader": sorted(trace.reader),
            "reader_depth2": sorted(trace.reader_depth2)}


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
              + (f", adds {len(files['added'])} to grpo's" if "added" in files else ""))
        for key in ("reader", "reader_depth2", "added", "entered"):
            if key in files:
                print(f"  {key}: {', '.join(files[key])}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
