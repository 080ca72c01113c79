"""docs/training.md's walk-through of a step quotes Trainer.training_step: every quoted line is in it, in order."""

import inspect
import re
from pathlib import Path

from rlvr.train.trainer import Trainer

DOC = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def _quoted_lines() -> list[str]:
    section = DOC.read_text(encoding="utf-8").split("### One step in the code", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_walkthrough_quotes_training_step_in_order():
    code = [line.split("  #")[0].strip() for line in inspect.getsource(Trainer.training_step).splitlines()]
    position = 0
    for quoted in _quoted_lines():
        assert quoted in code[position:], f"docs/training.md quotes {quoted!r}, not (or not here) in training_step"
        position = code.index(quoted, position) + 1


def test_training_step_stays_short():
    assert len(inspect.getsource(Trainer.training_step).splitlines()) <= 40
