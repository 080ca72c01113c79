"""Where rlvr's rollout spends its time on a device: the engines at the 1.5B shape, one case a process.

A diagnostic written for benchmarks/gpu_check.py's ``grpo`` part, whose first rollouts on CUDA were cut
(2026-12-04; they were slow, not stuck: docs/scaling.md, "GPU runs"). Each case builds the random Qwen2.5-1.5B-shaped model of gpu_check,
samples 64 rows (8 prompts x 8, the grpo part's batch) for a few new tokens, and prints the seconds of each
phase. Run every case, each in its own process cut after ``--timeout`` seconds (its stack is printed first):

    PYTHONPATH=$PWD/src:$PWD/kit/site python3 benchmarks/rollout_probe.py --device cuda

Cases: ``prefill`` (the model's forward on the 8 prompts with rlvr's cache), ``fused`` (DecodeEngine with its
fused decoding step), ``plain`` (DecodeEngine calling the model's forward), ``hf`` (HFEngine: transformers'
generate), ``bf16`` (DecodeEngine on bf16 weights without autocast). The fp32 cases run under bf16 autocast
with fp32 weights, as a ``bf16=true`` run does. ``--device cpu --layers 2`` checks the script here.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

HERE = Path(__file__).resolve().parent
CASES = ("prefill", "fused", "plain", "hf", "bf16")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def build(args, dtype):
    from transformers import AutoModelForCausalLM, Qwen2Config

    sys.path.insert(0, str(HERE))
    import gpu_check

    shape = {**gpu_check.QWEN["1.5B"], **({"num_hidden_layers": args.layers} if args.layers else {})}
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**shape, **gpu_check.COMMON), dtype=dtype).eval()
    return model


def prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    unique = [torch.randint(0, 49152, (60 + i,), generator=g).tolist() for i in range(8)]
    return [p for p in unique for _ in range(8)]


def timed(label: str, device: str, fn):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    seconds = time.perf_counter() - start
    print(json.dumps({"phase": label, "seconds": round(seconds, 4)}), flush=True)
    return out, seconds


def run_case(args) -> None:
    from rlvr.rollout.decode_engine import DecodeEngine
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.rollout.kv_cache import CACHE_KWARG, make_cache
    from rlvr.rollout.sampling import Sampling

    faulthandler.dump_traceback_later(args.every, repeat=True)  # progress: where it is every few seconds
    dtype = torch.bfloat16 if args.case == "bf16" else torch.float32
    model, _ = timed("build", args.device, lambda: build(args, dtype))
    vocab = model.config.vocab_size
    rows = prompts(vocab)
    autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if dtype == torch.float32
                else torch.autocast(args.device, enabled=False))
    sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0)
    with autocast, torch.no_grad():
        if args.case == "prefill":
            from rlvr.rollout.base import left_pad

            ids, mask = (x.to(args.device) for x in left_pad(rows[::8], 0))
            for i in range(3):
                cache = make_cache(model.config, ids.shape[1] + 16)
                timed(f"prefill {i}", args.device, lambda cache=cache: model(
                    input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                    **{CACHE_KWARG: cache}, use_cache=True, logits_to_keep=1))
            return
        if args.case == "hf":
            engine = HFEngine(model, pad_token_id=0, eos_token_ids=[vocab], max_batch_size=64)
        else:
            engine = DecodeEngine(model, pad_token_id=0, eos_token_ids=[vocab], max_batch_size=64,
                                  fused=args.case != "plain")
        for tokens in args.tokens:
            timed(f"generate T={tokens}", args.device,
                  lambda tokens=tokens: engine.generate(rows, max_new_tokens=tokens, sampling=sampling))
        if args.profile:
            with torch.profiler.profile() as prof:
                engine.generate(rows, max_new_tokens=args.tokens[0], sampling=sampling)
                sync(args.device)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, help="fewer layers than the 1.5B's 28 (the CPU check)")
    parser.add_argument("--tokens", default="2,8,32", help="new tokens of each timed generate, comma list")
    parser.add_argument("--timeout", type=float, default=40.0, help="seconds a case may take")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between stack dumps of a running case")
    parser.add_argument("--profile", action="store_true", help="torch.profiler over one more generate")
    args = parser.parse_args()
    args.tokens = [int(t) for t in args.tokens.split(",")]
    if args.case:
        run_case(args)
        return 0
    passed = ["--device", args.device, "--tokens", ",".join(map(str, args.tokens)), "--every", str(args.every),
              *(["--layers", str(args.layers)] if args.layers else []), *(["--profile"] if args.profile else [])]
    for case in args.cases.split(","):
        print(f"== {case}", flush=True)
        child = subprocess.Popen([sys.executable, __file__, *passed, "--case", case], start_new_session=True)
        try:
            child.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGABRT)  # faulthandler prints every thread's stack on SIGABRT
            time.sleep(2)
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            print(f"== {case}: cut after {args.timeout:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    faulthandler.enable(all_threads=True)
    sys.exit(main())
