"""trainer.py is the loop only: at most 300 lines, and the loop (``train``, ``training_step``, ``save``,
``_start``) reads the plans, never the config; the run's life is decided once in ``run_plan.py``."""

import inspect
from pathlib import Path

import rlvr.train.trainer as trainer_module
from rlvr.train.trainer import Trainer

MAX_LINES = 300


def test_trainer_py_is_at_most_300_lines():
    lines = len(Path(trainer_module.__file__).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"train/trainer.py has {lines} lines; move what is not the loop to a module named for it"


def test_the_loop_reads_no_option():
    for method in (Trainer.train, Trainer.training_step, Trainer.save, Trainer._start):
        assert "cfg" not in inspect.getsource(method), f"{method.__qualname__} reads the config; use the run plan"
