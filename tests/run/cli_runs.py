"""Running ``rlvr train`` as a user does, in a subprocess: a tiny model, a few steps, seconds each."""

import os
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

LOWERCASE = '''
def lowercase_frac(prompts, completions, **kw):
    return [sum(ch.islower() and ch.isascii() for ch in c) / max(1, len(c)) for c in completions]
'''

SLOW = '''
import time


def slow_lowercase(prompts, completions, **kw):
    time.sleep(1.0)  # a step of a second at least: two signals 0.05 s apart both land inside it
    return [sum(ch.islower() for ch in c) / max(1, len(c)) for c in completions]
'''


def train_command(output_dir: Path, reward: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", "train", "model=tiny-random", "data=rg:basic_arithmetic:size=64",
            "prompts_per_step=2", "num_generations=2", "max_completion_length=8", "progress_bar=false",
            "verifier_workers=1", f"reward_funcs={reward}", f"output_dir={output_dir}", *extra]


def reward_file(tmp_path: Path, source: str = LOWERCASE, name: str = "lowercase_frac") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return f"{path}:{name}"


def wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        path = run / "metrics.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= step:
            return
        time.sleep(0.02)
    raise AssertionError(f"the run did not reach step {step}")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]
