"""Golden runs: three tiny-random runs whose metrics and final weights pin the trainer's numerics.

    python tests/train/golden/record.py --write   # record tests/train/golden/runs.json (once, on purpose)
    python tests/train/golden/record.py --out F   # write this code's runs to F (what the test compares)

Each run is 3 steps of the 2-layer tiny-random model on a fixed seed, one thread (``OMP_NUM_THREADS=1``:
with two, some CPUs' float sums vary at ~1e-7 from run to run):

- ``grpo``: β = 0.04 (a reference model and the k3 KL) and 2 mini-batches (old log-probs, clipping);
- ``dagrpo``: pair masking with the ``reward`` scorer, anchors into failed groups;
- ``tagrpo``: pools of the question and 3 rephrasings, ratios anchored to q_0, and truncated IS.

Recorded per run: every metric of metrics.jsonl except timings and memory (``time/``, ``perf/``,
``memory/``, TRL's ``step_time``), and the SHA-256 of the final weights (float32 bytes, names sorted). A refactoring that
leaves the numerics alone reproduces them exactly on the machine that recorded them; the test says
which machine that was (``machine``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "runs.json"
UNTIMED = ("time/", "perf/", "memory/", "step_time")

LOWERCASE_REWARD = '''
def lowercase_frac(prompts, completions, **kw):
    """Learnable by a tiny random model: the fraction of ASCII lowercase characters."""
    return [sum(ch.islower() and ch.isascii() for ch in c) / max(1, len(c)) for c in completions]
'''

REPHRASED = [{"id": f"q{i}", "prompt": f"What is {i} + 2?", "answer": str(i + 2), "solution": f"{i} + 2 = {i + 2}.",
              "rephrasings": [f"Compute {i} plus 2.", f"Add 2 to {i}.", f"Find the sum of {i} and 2."]}
             for i in range(8)]


def run_options(work: Path) -> dict[str, dict]:
    """The three runs' options (flat ``key: value``), files written under ``work``."""
    reward = work / "lowercase_reward.py"
    reward.write_text(LOWERCASE_REWARD)
    rows = work / "rephrased.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in REPHRASED))
    common = {"model": "tiny-random", "max_steps": 3, "prompts_per_step": 4, "num_generations": 4,
              "max_completion_length": 12, "progress_bar": False, "verifier_workers": 1, "seed": 7,
              "learning_rate": 1e-3, "num_completions_to_log": 4,
              # the model's own forward in the rollout, as when these were recorded: the fused decoding
              # step rounds differently (~1e-7) and is pinned to this path by tests/rollout/test_fused_decoder.py
              "fused_decoding": False}
    return {
        "grpo": {**common, "algo": "grpo", "data": "rg:basic_arithmetic:size=64", "beta": 0.04,
                 "steps_per_generation": 2, "reward_funcs": [f"{reward}:lowercase_frac"]},
        "dagrpo": {**common, "algo": "dagrpo", "data": "gsm8k-100", "scorer": "reward", "max_completion_length": 16,
                   "reward_funcs": ["accuracy", f"{reward}:lowercase_frac"], "beta": 0.02},
        "tagrpo": {**common, "algo": "tagrpo", "data": str(rows), "num_rephrasings": 3, "num_generations": 2,
                   "ratio_anchor": "truncated_is", "num_iterations": 2,
                   "reward_funcs": [f"{reward}:lowercase_frac"]},
    }


def weights_hash(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def machine() -> dict[str, str]:
    """What the exact numbers depend on besides the code."""
    import torch
    import transformers

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": str(torch.get_num_threads())}


def record() -> dict:
    """Run the three golden runs in this process; return {"machine": ..., "runs": {name: {...}}}."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    runs = {}
    with tempfile.TemporaryDirectory(prefix="rlvr-golden-") as tmp:
        work = Path(tmp)
        for name, options in run_options(work).items():
            cfg = build_config({**options, "output_dir": str(work / name)})
            trainer = Trainer(cfg)
            trainer.train()
            lines = (work / name / "metrics.jsonl").read_text().splitlines()
            metrics = [{k: v for k, v in json.loads(line).items() if not k.startswith(UNTIMED)} for line in lines]
            samples = [json.loads(line) for line in (work / name / "samples.jsonl").read_text().splitlines()]
            runs[name] = {"metrics": metrics, "samples": samples, "weights_sha256": weights_hash(trainer.policy)}
    return {"machine": machine(), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {FIXTURE.name} (the fixture)")
    parser.add_argument("--out", type=Path, help="write the runs to this JSON file")
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS") != "1":
        sys.exit("run with OMP_NUM_THREADS=1 (exact repeats need one thread)")
    result = record()
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if not (args.write or args.out):
        parser.error("pass --write or --out FILE")
    path = FIXTURE if args.write else args.out
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
