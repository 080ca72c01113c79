"""Rollout modes side by side: rlvr's engine, colocated vLLM and a vLLM server, and a training step with
and without async generation. CPU, SmolLM2-135M-Instruct, fp32.

Run alone (the machine's cores are the measurement), in the vLLM environment:

    .venv-vllm/bin/python benchmarks/bench_rollout_modes.py                    # batch 16,64; 64 tokens; steps
    .venv-vllm/bin/python benchmarks/bench_rollout_modes.py --quick            # batch 4, 16 tokens, no steps

Generation (the engines' own ``generate``, as the trainer calls it: per-request seeds, sampling
log-probs of every token): each engine samples exactly --new-tokens tokens per sequence (the model's
EOS is switched off for the run: the stop id is the vocabulary's last, which is never drawn here; a
warning says otherwise) from chat-formatted chain_sum
prompts, temperature 1; the median of --repeats calls, the engines alternating order between
repeats. Weight sync: the median time of ``sync_weights()`` (colocated: tensors handed to vLLM in
process; server: HTTP + a gloo broadcast of every tensor to the server process).

  rlvr      rlvr.rollout.DecodeEngine (the trainer's default)
  colocate  rlvr.rollout.vllm_engine.VLLMEngine (vLLM in this process)
  server    rlvr.rollout.vllm_client.VLLMServerEngine against `rlvr vllm-serve` started by this script
            on 127.0.0.1 (another process on the same two cores: on a GPU node it has its own GPUs)

Steps (--steps N, default 3): `rlvr train` with rollout_engine=vllm, B=4 prompts x G=8, 64 tokens,
once with async_generation=false and once with true; the median time/step_s of steps 2..N (step 1
has nothing sampled ahead). On a 2-core CPU both phases compete for the same cores, so this
measures the cost of the overlap here, not its gain on GPUs.

A script, not a test; it asserts nothing about speed.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

from rlvr.config import DEFAULT_DATA
from rlvr.data import load_rows, prompt_messages, render_prompt
from rlvr.data.prompts import DEFAULT_INSTRUCTION
from rlvr.models import load_policy, smollm2_path
from rlvr.rollout.sampling import Sampling


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chat_prompts(tokenizer, count: int) -> list[list[int]]:
    rows = load_rows(DEFAULT_DATA)[:count]
    return [tokenizer(render_prompt(tokenizer, prompt_messages(row["prompt"], system_prompt=None,
                                                               instruction=DEFAULT_INSTRUCTION)),
                      add_special_tokens=False)["input_ids"] for row in rows]


class Server:
    def __init__(self, folder: Path, log: Path):
        self.port, self.group_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "rlvr.cli", "vllm-serve", "--model", str(folder), "--host", "127.0.0.1",
               "--port", str(self.port)]
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def wait(self, limit: float = 300) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rlvr vllm-serve exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).close()
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("rlvr vllm-serve did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def generation(args, work: Path) -> dict:
    from rlvr.rollout.decode_engine import DecodeEngine
    from rlvr.rollout.vllm_client import VLLMServerEngine
    from rlvr.rollout.vllm_engine import VLLMEngine

    model, tokenizer = load_policy(str(smollm2_path()), dtype="float32")
    model.eval()
    never = model.config.vocab_size - 1  # the last id, never drawn here (checked: tokens == batch x new tokens)
    model.config.eos_token_id = None
    model.generation_config.eos_token_id = None
    folder = work / "smollm2-no-eos"
    model.save_pretrained(folder)
    pad = tokenizer.pad_token_id
    server = Server(folder, work / "server.log")
    try:
        server.wait()
        engines = {
            "rlvr": DecodeEngine(model, pad_token_id=pad, eos_token_ids=[never], max_batch_size=max(args.batch_list)),
            "colocate": VLLMEngine(model, pad_token_id=pad, eos_token_ids=[never]),
            "server": VLLMServerEngine(model, pad_token_id=pad, eos_token_ids=[never], base_url=server.url,
                                       group_port=server.group_port),
        }
        prompts_all = chat_prompts(tokenizer, 64)
        for engine in engines.values():  # warm-up
            engine.generate(prompts_all[:2], max_new_tokens=8, sampling=Sampling(1.0), row_seeds=[1, 2])
        rows = []
        for batch in args.batch_list:
            prompts = [prompts_all[i % len(prompts_all)] for i in range(batch)]
            seeds = list(range(batch))
            times = {name: [] for name in engines}
            tokens = {}
            for rep in range(args.repeats):
                order = list(engines) if rep % 2 == 0 else list(engines)[::-1]
                for name in order:
                    start = time.perf_counter()
                    out = engines[name].generate(prompts, max_new_tokens=args.new_tokens, sampling=Sampling(1.0),
                                                 row_seeds=seeds)
                    times[name].append(time.perf_counter() - start)
                    tokens[name] = sum(len(c.token_ids) for c in out)
            for name in engines:
                if tokens[name] != batch * args.new_tokens:
                    print(f"warning: {name} produced {tokens[name]} tokens, expected {batch * args.new_tokens}",
                          file=sys.stderr)
                seconds = statistics.median(times[name])
                rows.append({"batch": batch, "engine": name, "tokens": tokens[name], "seconds": seconds,
                             "tok_s": tokens[name] / seconds, "all_seconds": times[name]})
            print(f"  batch {batch:>3}: " + " | ".join(
                f"{r['engine']} {r['tok_s']:6.1f} tok/s" for r in rows[-len(engines):]), flush=True)
        syncs = {}
        for name in ("colocate", "server"):
            seconds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                engines[name].sync_weights()
                seconds.append(time.perf_counter() - start)
            syncs[name] = {"seconds": statistics.median(seconds), "all_seconds": seconds}
        print("  sync_weights: " + " | ".join(f"{k} {v['seconds']:.2f} s" for k, v in syncs.items()), flush=True)
        engines["server"].close()
    finally:
        server.stop()
    return {"rows": rows, "sync": syncs}


def steps(args, work: Path) -> dict:
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    out = {}
    for flag in (False, True):
        cfg = build_config({
            "model": "smollm2-135m", "rollout_engine": "vllm", "async_generation": flag, "max_steps": args.steps,
            "prompts_per_step": 4, "num_generations": 8, "max_completion_length": 64,
            "output_dir": str(work / f"async_{flag}"), "progress_bar": False, "verifier_workers": 1,
        })
        history = Trainer(cfg).train()
        later = history[1:]
        out[str(flag).lower()] = {
            "step_s": statistics.median(m["time/step_s"] for m in later),
            "rollout_s": statistics.median(m["time/rollout_s"] for m in later),
            "update_s": statistics.median(m["time/update_s"] for m in later),
            "all_step_s": [m["time/step_s"] for m in history],
        }
        print(f"  async_generation={str(flag).lower()}: step {out[str(flag).lower()]['step_s']:.1f} s "
              f"(rollout wait {out[str(flag).lower()]['rollout_s']:.1f} s, update {out[str(flag).lower()]['update_s']:.1f} s)",
              flush=True)
    out["ratio_async_to_sync"] = out["true"]["step_s"] / out["false"]["step_s"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="training steps per async setting (0: skip)")
    parser.add_argument("--quick", action="store_true", help="batch 4, 16 tokens, 1 repeat, no steps")
    parser.add_argument("--out", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.new_tokens, args.repeats, args.steps = "4", 16, 1, 0
    args.batch_list = [int(b) for b in args.batches.split(",")]
    import vllm

    print(f"bench_rollout_modes: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__}, vllm {vllm.__version__}; SmolLM2-135M fp32, {args.new_tokens} tokens", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_modes_") as tmp:
        result = {"args": {k: v for k, v in vars(args).items()}, "generation": generation(args, Path(tmp))}
        if args.steps > 1:
            result["steps"] = steps(args, Path(tmp))
    print("\n| batch | rlvr tok/s | colocated vLLM | vLLM server | server / colocated |\n|---|---|---|---|---|")
    by = {(r["batch"], r["engine"]): r["tok_s"] for r in result["generation"]["rows"]}
    for batch in args.batch_list:
        print(f"| {batch} | {by[batch, 'rlvr']:.1f} | {by[batch, 'colocate']:.1f} | {by[batch, 'server']:.1f} | "
              f"{by[batch, 'server'] / by[batch, 'colocate']:.2f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
