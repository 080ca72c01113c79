"""How rlvr's step time grows with G, the TA-GRPO pool (N rephrasings) and the completion length.

Run (from the repository root, after `make setup`):

    .venv/bin/python benchmarks/bench_scaling.py                 # SmolLM2-135M, the three sweeps below
    .venv/bin/python benchmarks/bench_scaling.py --quick         # tiny-random model, short sweeps (~1 min)
    .venv/bin/python benchmarks/bench_scaling.py --sweeps G --steps 2
    .venv/bin/python benchmarks/bench_scaling.py --sweeps T --lengths 32,128,256,512,1024 --ignore-eos \
        --lm-head-chunk-tokens 1024 --max-tokens-per-micro-batch 4096 --steps 1   # every response T tokens

Sweeps (everything else at the base setting: B = 2 prompts, G = 8, N = 0, 64 completion tokens,
GRPO, beta 0, fp32, rlvr's default engine):

  G  num_generations 2, 4, 8, 16
  N  TA-GRPO with N rule rephrasings per question (algo=tagrpo, num_rephrasings=N; N = 0 is GRPO):
     the pool is (N + 1) x G responses per question, N = 0, 1, 2, 3 (G = 4)
  T  max_completion_length 32, 64, 128, 256 (--lengths)

For each setting one warm-up step is dropped and the median of --steps timed steps is kept. The work a
step does is counted in tokens: generated tokens (the sum of completion lengths: SmolLM2 stops at EOS,
so this is measured, not set), scored tokens (prompt + completion tokens of every response, what an
unshared forward and backward would see) and forward tokens (each distinct prompt once plus every
response: what rlvr's shared-prefix scoring computes, up to a prompt repeated once per micro-batch).
The script prints seconds per step, tokens, and milliseconds per 1 000 tokens for the rollout (per
generated token) and the update (per scored and per forward token). Linear cost in tokens means the
per-token columns stay flat along a sweep; the last lines fit
step_s = a + b * tokens over all settings and give the largest relative residual.

SmolLM2 ends most chain_sum answers well before 256 tokens, so a T sweep to 1 024 measures short
responses unless ``--ignore-eos`` is given: the engine is then told no token ends a response, every
response runs to T tokens (truncated, as a model that never stops would be) and generated = B x G x T.
The update is the trainer's own on those responses; ``--lm-head-chunk-tokens`` and
``--max-tokens-per-micro-batch`` set the options of those names (at 1 024 tokens the plain head's
[n, T, V] logits and a 16-row micro-batch's activations do not fit a small machine).

This is a script, not a test. Timings on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import warnings

import torch

BASE = {"prompts_per_step": 2, "num_generations": 8, "max_completion_length": 64, "n": 0}
SWEEPS = {
    "G": [{"num_generations": g} for g in (2, 4, 8, 16)],
    "N": [{"n": n, "num_generations": 4} for n in (0, 1, 2, 3)],
    "T": [{"max_completion_length": t} for t in (32, 64, 128, 256)],
}
QUICK_SWEEPS = {
    "G": [{"num_generations": g} for g in (2, 8)],
    "N": [{"n": n, "num_generations": 4} for n in (0, 2)],
    "T": [{"max_completion_length": t} for t in (16, 64)],
}


def build_trainer(args, setting: dict, out_dir: str):
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    s = {**BASE, **setting}
    overrides = {
        "model": args.model, "device": "cpu", "dtype": "float32", "beta": 0.0,
        "prompts_per_step": s["prompts_per_step"], "num_generations": s["num_generations"],
        "max_completion_length": s["max_completion_length"], "max_steps": 1 + args.steps,
        "seed": args.seed, "output_dir": out_dir, "progress_bar": False, "log_completions": False,
        "verifier_workers": 1, "data": args.data, "lm_head_chunk_tokens": args.lm_head_chunk_tokens,
        "max_tokens_per_micro_batch": args.max_tokens_per_micro_batch,
    }
    if s["n"] > 0:
        overrides.update({"algo": "tagrpo", "num_rephrasings": s["n"]})
    trainer = Trainer(build_config(overrides))
    if args.ignore_eos:  # no token id is -1: every response runs to max_completion_length
        trainer.engine.eos_token_ids = [-1]
    counts = {"generated": 0, "scored": 0, "forward": 0}
    generate = trainer.engine.generate

    def counting_generate(prompts, *a, **k):
        completions = generate(prompts, *a, **k)
        counts["generated"] += sum(len(c.token_ids) for c in completions)
        counts["scored"] += sum(len(p) + len(c.token_ids) for p, c in zip(prompts, completions))
        counts["forward"] += sum(len(p) for p in {tuple(p) for p in prompts}) + sum(len(c.token_ids) for c in completions)
        return completions

    trainer.engine.generate = counting_generate
    return trainer, counts


def run_setting(args, sweep: str, setting: dict) -> dict:
    with tempfile.TemporaryDirectory() as out_dir:
        trainer, counts = build_trainer(args, setting, out_dir)
        trainer._start()
        records = []
        for step in range(1, 2 + args.steps):
            counts.update(generated=0, scored=0, forward=0)
            metrics = trainer.training_step(step).metrics
            if step > 1:
                records.append({"step_s": metrics["time/step_s"], "rollout_s": metrics["time/rollout_s"],
                                "update_s": metrics["time/update_s"], **counts})
        trainer.rewarder.close()
    med = {key: statistics.median(r[key] for r in records) for key in records[0]}
    label = ", ".join(f"{k}={v}" for k, v in setting.items())
    row = {"sweep": sweep, "setting": label, **med, "records": records,
           "rollout_ms_per_1k": 1e6 * med["rollout_s"] / max(1, med["generated"]),
           "update_ms_per_1k": 1e6 * med["update_s"] / max(1, med["scored"]),
           "update_ms_per_1k_forward": 1e6 * med["update_s"] / max(1, med["forward"])}
    print(f"  {sweep} {label:<28} step {med['step_s']:7.2f} s  generated {med['generated']:6.0f}  "
          f"scored {med['scored']:6.0f}  rollout {row['rollout_ms_per_1k']:7.1f} ms/1k  "
          f"update {row['update_ms_per_1k']:7.1f} ms/1k scored, {row['update_ms_per_1k_forward']:7.1f} ms/1k forward",
          flush=True)
    return row


def linear_fit(rows: list[dict]) -> tuple[float, float, float]:
    """step_s = a + b * (generated + scored); returns a, b and the largest |residual| / step_s."""
    xs = torch.tensor([r["generated"] + r["scored"] for r in rows], dtype=torch.float64)
    ys = torch.tensor([r["step_s"] for r in rows], dtype=torch.float64)
    design = torch.stack([torch.ones_like(xs), xs], dim=1)
    a, b = torch.linalg.lstsq(design, ys[:, None]).solution[:, 0].tolist()
    residual = float(((ys - (a + b * xs)).abs() / ys).max())
    return a, b, residual


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", default="G,N,T", help="comma list of G, N, T (default all)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setting (default 2)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data", default="rg:chain_sum:size=200:seed=7")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="tiny-random model, two settings per sweep")
    parser.add_argument("--lengths", default=None,
                        help="comma list of max_completion_length for the T sweep (default 32,64,128,256)")
    parser.add_argument("--ignore-eos", action="store_true", help="every response runs to max_completion_length")
    parser.add_argument("--lm-head-chunk-tokens", type=int, default=0, help="the trainer option (default 0: plain head)")
    parser.add_argument("--max-tokens-per-micro-batch", type=int, default=None, help="the trainer option (default none)")
    parser.add_argument("--json", default=None, help="also write every record to this file")
    args = parser.parse_args(argv)
    sweeps = dict(QUICK_SWEEPS if args.quick else SWEEPS)
    if args.lengths:
        sweeps["T"] = [{"max_completion_length": int(t)} for t in args.lengths.split(",") if t.strip()]
    if args.quick:
        args.model, args.steps = "tiny-random", 1
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(f"bench_scaling: {args.model}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"transformers {transformers.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs"
          + (", EOS ignored" if args.ignore_eos else "")
          + f", lm_head_chunk_tokens {args.lm_head_chunk_tokens}, max_tokens_per_micro_batch {args.max_tokens_per_micro_batch}")
    rows = []
    for sweep in [s.strip() for s in args.sweeps.split(",") if s.strip()]:
        for setting in sweeps[sweep]:
            start = time.perf_counter()
            rows.append(run_setting(args, sweep, setting))
            rows[-1]["wall_s"] = time.perf_counter() - start
    print()
    print(f"{'sweep':<5} {'setting':<30} {'step s':>7} {'gen tok':>8} {'scored tok':>10} "
          f"{'forward tok':>11} {'rollout ms/1k gen':>18} {'update ms/1k scored':>20} {'update ms/1k forward':>21}")
    for r in rows:
        print(f"{r['sweep']:<5} {r['setting']:<30} {r['step_s']:>7.2f} {r['generated']:>8.0f} {r['scored']:>10.0f} "
              f"{r['forward']:>11.0f} {r['rollout_ms_per_1k']:>18.1f} {r['update_ms_per_1k']:>20.1f} "
              f"{r['update_ms_per_1k_forward']:>21.1f}")
    if len(rows) >= 3:
        a, b, residual = linear_fit(rows)
        print(f"\nfit over all settings: step_s = {a:.2f} + {1e3 * b:.3f} ms x (generated + scored tokens); "
              f"largest relative residual {100 * residual:.0f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
