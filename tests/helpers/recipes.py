"""The recipes in examples/recipes/ made to run offline: only their model and dataset lines change."""

from __future__ import annotations

import json
import re
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"


def offline(recipe: str, folder: Path, model: Path, rows: list[dict]) -> Path:
    """The recipe with its model_name_or_path and dataset_name lines swapped, and its data file, in ``folder``."""
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    text = (RECIPES / recipe).read_text()
    swapped = re.sub(r"^model_name_or_path: .*$", f"model_name_or_path: {model}", text, flags=re.MULTILINE)
    swapped = re.sub(r"^dataset_name: .*$", f"dataset_name: {data}", swapped, flags=re.MULTILINE)
    assert sum(a != b for a, b in zip(text.splitlines(), swapped.splitlines())) == 2  # only those two lines
    path = folder / recipe
    path.write_text(swapped)
    return path
