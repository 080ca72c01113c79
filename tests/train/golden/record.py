"""Golden runs: three tiny-random runs whose metrics and final weights pin the trainer's numerics.

    python tests/train/golden/record.py --write   # record tests/train/golden/runs.json (once, on purpose)
    python tests/train/golden/record.py --out F   # write this code's runs to F (what the test compares)

Each run is 3 steps of the 2-layer tiny-random model on a fixed seed, one thread (``OMP_NUM_THREADS=1``:
with two, some CPUs' float sums vary at ~1e-7 from run to run):

- ``grpo``: β = 0.04 (a reference model and the k3 KL) and 2 mini-batches (old log-probs, clipping);
- ``dagrpo``: pair masking with the ``reward`` scorer, anchors into failed groups;
- ``tagrpo``: pools of the question and 3 rephrasings, ratios anchored to q_0, and truncated IS.

Recorded per run: every metric of metrics.jsonl except timings and memory (``time/``, ``perf/``,
``memory/``, TRL's ``step_time``), the SHA-256 of the final weights (float32 bytes, names sorted) and,
per tensor, the float64 L2 norm of what training changed (final − initial weights), which any machine can
compare at a tolerance. A refactoring that leaves the numerics alone reproduces them exactly on a machine
of the same ``machine()`` identity: what selects the kernels the numbers come from (torch's CPU
capability, the CPU vendor and instruction-set flags that MKL and oneDNN dispatch on, the MKL and oneDNN
builds, the variables that override their dispatch, the thread count, python/torch/transformers), not
the CPU's marketing name.
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
              "learning_rate": 1e-3, "num_completions_to_log": 4}  # the default engine and decoding step
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


# CPU flags that select a kernel in torch (ATen's dispatch), MKL or oneDNN: two CPUs that differ in one of
# them may run other instructions (another summation order) for the same product
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
# environment variables that change which kernels those libraries pick
DISPATCH_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE",
                      "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpuinfo() -> dict[str, str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}


def machine() -> dict[str, str]:
    """What the exact numbers depend on besides the code: the identity of the kernels that compute them."""
    import torch
    import transformers

    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    build = torch.__config__.show()
    libraries = [line.strip(" -") for line in build.splitlines() if "Math Kernel Library" in line or "MKL-DNN" in line]
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu_vendor": info.get("vendor_id", platform.machine()),
            "cpu_flags": " ".join(f for f in KERNEL_FLAGS if f in flags), "libraries": "; ".join(libraries),
            "dispatch_env": " ".join(f"{k}={os.environ[k]}" for k in DISPATCH_VARIABLES if k in os.environ),
            "threads": str(torch.get_num_threads()), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def update_norms(initial: dict, model) -> dict[str, float]:
    """Per tensor, the float64 L2 norm of final − initial weights: what training did, comparable at a tolerance."""
    return {name: float((tensor.detach().double() - initial[name]).norm()) for name, tensor in
            sorted(model.state_dict().items())}


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
            initial = {k: v.detach().double().clone() for k, v in trainer.policy.state_dict().items()}
            trainer.train()
            lines = (work / name / "metrics.jsonl").read_text().splitlines()
            metrics = [{k: v for k, v in json.loads(line).items() if not k.startswith(UNTIMED)} for line in lines]
            samples = [json.loads(line) for line in (work / name / "samples.jsonl").read_text().splitlines()]
            runs[name] = {"metrics": metrics, "samples": samples, "weights_sha256": weights_hash(trainer.policy),
                          "update_norms": update_norms(initial, trainer.policy)}
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
