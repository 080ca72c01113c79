"""`ruff check` over the repository, with the rules in pyproject.toml ([tool.ruff])."""

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    assert importlib.util.find_spec("ruff") is not None, "ruff is missing: pip install -e '.[dev]'"
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(REPO)],
                            check=False, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, f"ruff check found problems (fix them, or `ruff check --fix`):\n{result.stdout}"
