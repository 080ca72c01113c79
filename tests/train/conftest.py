"""Shared helpers for trainer tests: tiny-random runs on CPU, offline."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

LOWERCASE_REWARD = '''
def lowercase_frac(prompts, completions, **kw):
    """Learnable by a tiny random model: the fraction of ASCII lowercase characters."""
    return [sum(ch.islower() and ch.isascii() for ch in c) / max(1, len(c)) for c in completions]
'''


@pytest.fixture
def lowercase_reward(tmp_path: Path) -> str:
    path = tmp_path / "lowercase_reward.py"
    path.write_text(LOWERCASE_REWARD)
    return f"{path}:lowercase_frac"


def tiny_overrides(output_dir: Path, **extra) -> dict:
    base = {
        "model": "tiny-random",
        "data": "rg:basic_arithmetic:size=64",
        "max_steps": 3,
        "prompts_per_step": 4,
        "num_generations": 4,
        "max_completion_length": 12,
        "output_dir": str(output_dir),
        "progress_bar": False,
        "verifier_workers": 1,
    }
    base.update(extra)
    return base
