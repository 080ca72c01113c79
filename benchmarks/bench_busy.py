"""The default training step on a busy machine: idle, then beside a competing torch process.

Run (from the repository root, after `make setup`; run it alone: it starts its own competing load):

    .venv/bin/python benchmarks/bench_busy.py                 # rlvr's default set-up vs libgomp's default
    .venv/bin/python benchmarks/bench_busy.py --steps 2 --variants rlvr

For each variant (an environment for the `rlvr train` process) the script runs the default job
(`rlvr train` on its built-in default, `max_steps = --steps`, a fresh output folder) twice: on the
otherwise idle machine, and beside a competing load it starts itself: another Python process whose
torch (2 threads, libgomp's default spin-waiting) multiplies 512 x 512 matrices in a loop, as a second
training job on the same machine would. It reports the median `time/step_s` of the steps after the
first (the first holds one-off warm-up) and the ratio busy / idle. With the 2 cores shared fairly
the ratio would be about 2.

Variants:

  rlvr   rlvr's own set-up (src/rlvr/threads.py: OMP_WAIT_POLICY=PASSIVE unless the user chose one)
  spin   libgomp's default wait (GOMP_SPINCOUNT=300000, what torch does when nothing is set)
  spin10k, spin30k  a short spin before sleeping (GOMP_SPINCOUNT=10000 / 30000)
  one    one thread (OMP_NUM_THREADS=1) with rlvr's set-up

This is a script, not a test. Timings on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "rlvr": {},
    "spin": {"GOMP_SPINCOUNT": "300000"},
    "spin10k": {"GOMP_SPINCOUNT": "10000"},
    "spin30k": {"GOMP_SPINCOUNT": "30000"},
    "one": {"OMP_NUM_THREADS": "1"},
}
LOAD = """
import torch
torch.set_num_threads(2)
a = torch.randn(512, 512)
while True:
    a = torch.tanh(a @ a)
"""


def run_default_job(env_extra: dict, steps: int, folder: Path) -> list[dict]:
    """`rlvr train max_steps=steps` in a fresh folder; its metrics records."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}, **env_extra)
    rlvr = Path(sys.executable).with_name("rlvr")
    subprocess.run([str(rlvr), "train", f"max_steps={steps}", f"output_dir={folder}"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summary(records: list[dict]) -> dict:
    timed = records[1:] or records
    return {"step_s": statistics.median(r["time/step_s"] for r in timed),
            "rollout_s": statistics.median(r["time/rollout_s"] for r in timed),
            "update_s": statistics.median(r["time/update_s"] for r in timed),
            "len_mean": statistics.mean(r["rollout/response_len_mean"] for r in timed),
            "steps": [round(r["time/step_s"], 2) for r in records]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="rlvr,spin", help=f"comma-separated, of {','.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=3, help="steps per run; the first is not timed")
    parser.add_argument("--json", default=None, help="also write every timing here")
    args = parser.parse_args()
    variants = args.variants.split(",")
    for name in variants:
        if name not in VARIANTS:
            parser.error(f"--variants: unknown {name!r}; use some of {', '.join(VARIANTS)}")

    print(f"# bench_busy: default `rlvr train` step, idle vs beside a 2-thread torch matmul loop; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench_busy_"))
    results: dict = {}
    try:
        for condition in ("idle", "busy"):
            load = subprocess.Popen([sys.executable, "-c", LOAD]) if condition == "busy" else None
            try:
                if load is not None:
                    time.sleep(3)  # the load's torch import
                for name in variants:
                    folder = root / f"{name}-{condition}"
                    results[(name, condition)] = summary(run_default_job(VARIANTS[name], args.steps, folder))
                    shutil.rmtree(folder, ignore_errors=True)
                    print(f"  {name:5s} {condition}: {results[(name, condition)]}", flush=True)
            finally:
                if load is not None:
                    load.kill()
                    load.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print("\n| variant | idle step s | busy step s | busy / idle | idle rollout / update s | busy rollout / update s |")
    print("|---|---|---|---|---|---|")
    for name in variants:
        idle, busy = results[(name, "idle")], results[(name, "busy")]
        print(f"| {name} | {idle['step_s']:.1f} | {busy['step_s']:.1f} | **{busy['step_s'] / idle['step_s']:.2f}** | "
              f"{idle['rollout_s']:.1f} / {idle['update_s']:.1f} | {busy['rollout_s']:.1f} / {busy['update_s']:.1f} |")
    if "rlvr" in variants:
        base = results[("rlvr", "idle")]["step_s"]
        for name in variants:
            if name != "rlvr":
                print(f"idle step, {name} / rlvr: {results[(name, 'idle')]['step_s'] / base:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
