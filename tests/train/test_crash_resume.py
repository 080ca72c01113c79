"""A run killed with SIGKILL at random points and resumed each time ends where an uninterrupted run ends.

The kills hit the whole process group (verifier workers too), as a machine crash or an OOM kill
would, at random moments after a random number of steps: during generation, the update, metric
writes or a checkpoint save. After every kill each ``checkpoint-*`` checkpoint must be complete and
loadable (the atomic rename), and the final weights and metrics must equal the uninterrupted run's.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

from rlvr.run.checkpoints import latest_checkpoint, list_checkpoints, load_rng_state, load_trainer_state
from tests.helpers.metrics import comparable

from .conftest import tiny_overrides

STEPS = 6
CHECKPOINT_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "training_args.bin")


def _options(out, reward):
    return tiny_overrides(out, reward_funcs=[reward], learning_rate=1e-3, max_steps=STEPS, save_steps=1,
                          save_total_limit=2, num_iterations=2, beta=0.04)


def _cli(options: dict) -> list[str]:
    return [f"{k}=[{','.join(v)}]" if isinstance(v, list) else f"{k}={v}" for k, v in options.items()]


def _assert_checkpoints_complete(run) -> None:
    for folder in list_checkpoints(run):
        for name in CHECKPOINT_FILES:
            assert (folder / name).is_file(), f"{folder} lacks {name}"
        state = load_trainer_state(folder)
        assert folder.name == f"checkpoint-{state['step']}"
        weights = load_file(next(folder.glob("*.safetensors")))  # a torn file fails here
        assert weights and all(torch.isfinite(w).all() for w in weights.values())
        torch.load(folder / "optimizer.pt", weights_only=True)
        load_rng_state(folder)  # transformers' safe load (numpy's state allowed)


def _final_weights(run) -> dict[str, torch.Tensor]:
    return load_file(next(latest_checkpoint(run).glob("*.safetensors")))


def _metrics(run) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [comparable(json.loads(x))
            for x in lines]


def test_sigkill_at_random_points_then_resume_equals_uninterrupted(tmp_path, lowercase_reward):
    # Both runs in the same kind of process and thread count: on some CPUs (seen on AMD EPYC) the
    # kernels' results depend on the number of threads, which is not what this test is about.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    full = [sys.executable, "-m", "rlvr.cli", "train", *_cli(_options(tmp_path / "full", lowercase_reward))]
    subprocess.run(full, env=env, stdout=subprocess.DEVNULL, check=True, timeout=600)
    run = tmp_path / "killed"
    command = [sys.executable, "-m", "rlvr.cli", "train", *_cli(_options(run, lowercase_reward)), "resume=true"]
    rng = random.Random(1234)
    kill_after = sorted(rng.sample(range(1, STEPS), 3))  # kill once these many checkpoints exist
    kills = 0
    for target in [*kill_after, None]:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        if target is None:  # the last launch runs to the end
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err.decode()[-3000:]
            break
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            done = latest_checkpoint(run)
            if done is not None and load_trainer_state(done)["step"] >= target:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))  # somewhere inside the next step or its save
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        _assert_checkpoints_complete(run)
    assert kills >= 2  # the run really was interrupted (a kill can miss only if the run already ended)
    full, killed = _final_weights(tmp_path / "full"), _final_weights(run)
    assert full.keys() == killed.keys()
    for key in full:
        torch.testing.assert_close(killed[key], full[key], rtol=0, atol=0)
    assert _metrics(run) == _metrics(tmp_path / "full")
    assert not list(run.glob(".tmp-*"))  # the last save cleaned any torn temp folder
