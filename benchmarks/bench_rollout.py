"""Rollout throughput: rlvr's DecodeEngine against plain transformers `generate`, and both against the ceiling.

Run (from the repository root, after `make setup`; TRL is not needed):

    .venv/bin/python benchmarks/bench_rollout.py                       # batch 1,4,16,64; 64 new tokens; fp32, bf16
    .venv/bin/python benchmarks/bench_rollout.py --quick               # smoke: batch 1,4; 16 tokens; fp32
    .venv/bin/python benchmarks/bench_rollout.py --batches 16,64 --new-tokens 128 --dtypes bfloat16

For each dtype and batch size both engines sample exactly --new-tokens tokens per sequence (EOS is
suppressed: `min_new_tokens` for generate, an EOS id that never occurs for rlvr, so every call
produces batch x new_tokens tokens and finished-row compaction never kicks in) from
SmolLM2-135M-Instruct (rlvr's converted folder) on chat-formatted reasoning-gym chain_sum prompts,
temperature 1, no top-k/top-p. With --group-size G the batch holds batch/G distinct prompts, each
repeated G times (a GRPO rollout); the default 1 makes every prompt distinct.

  rlvr  `rlvr.rollout.DecodeEngine.generate` (the trainer's default engine: shared prefill,
        static KV cache, inverse-CDF sampling on the device, sampling log-probs of every token, the static
        decoding step of rlvr.rollout.static_decoder)
  rlvr-plain  the same engine with fused=False (the model's forward at every step)
  hf    `model.generate(input_ids, attention_mask, generation_config)` with the same sampling settings,
        nothing else (no log-probs)
  vllm  (--engines rlvr,hf,vllm, run with .venv-vllm/bin/python) rlvr's VLLMEngine's in-process
        `vllm.LLM.generate` with min_tokens = max_tokens and ignore_eos, no log-probs

and the two are run back to back (order alternating between repeats) so background load hits both.

Ceiling: torch.matmul of two N x N matrices (--matmul-size, default 2048) in the same dtype, best of
several runs, measured before and after the generation runs of that dtype (the higher is used).
Fraction of ceiling = (2 x parameters x tokens/s) / matmul FLOP/s, i.e. the model's forward FLOPs per
token (2 per weight; the tied embedding counted once, as the LM head; attention over the context
ignored, small at these lengths) at the measured rate, over what a dense matmul reaches here.

Second ceiling, per batch size ("shape ceiling"): the time of one decoding step's matrix products
alone (every Linear of the model, LM head included, on a [batch, in] input, timed back to back) gives
the tokens/s a decoder would reach if nothing but those products ran. At small batches these
products are skinny and far from the square-matmul rate; this says how much of the gap is the
shapes themselves and how much is everything else (attention, sampling, framework overhead).
The "fused shapes" ceiling is the same for the products rlvr's fused step runs (q/k/v stacked; on
CPU float32 oneDNN-prepacked weights), the bound for the `rlvr` engine.

The prefill (the distinct prompts through the model's forward, both rlvr engines) is also timed alone
per batch, and the rlvr rows are printed once more as the decoding loop alone: tokens / (call seconds -
prefill seconds). The shape ceilings count decoding steps only, so with many distinct prompts the
prefill is a share of the call they do not describe; with --group-size G it is 1/G of it.

This is a script, not a test. Timings on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import os

import rlvr  # noqa: F401  (before torch: rlvr's OpenMP set-up, src/rlvr/threads.py, as `rlvr train` has it)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import platform
import statistics
import sys
import time
import warnings

import torch
from transformers import GenerationConfig

from rlvr.config import DEFAULT_DATA
from rlvr.data import load_rows, prompt_messages, render_prompt
from rlvr.data.prompts import DEFAULT_INSTRUCTION
from rlvr.models import eos_token_ids, load_policy, smollm2_path
from rlvr.rollout.decode_engine import DecodeEngine
from rlvr.rollout.sampling import Sampling

NEVER = -1  # an EOS id no sampled token equals: fixed work per call


def shape_ceiling_tok_s(model, batch: int, dtype: torch.dtype, reps: int = 3, fused: bool = False) -> float:
    """tokens/s if a decoding step at this batch cost only its Linear products (best of reps).

    fused: the products as rlvr's static step runs them instead (q/k/v stacked into one; on CPU
    float32 oneDNN-prepacked weights: rlvr.rollout.static_decoder.Projection).
    """
    if fused:
        from rlvr.rollout.static_decoder import StaticDecoder

        decoder = StaticDecoder(model, batch_hint=batch)
        projections = [proj for layer in decoder.layers for proj in layer.values()] + [decoder.head]
        products = [(proj, proj.weight.shape[1]) for proj in projections]
    else:
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        products = [(lambda x, w=m.weight: torch.nn.functional.linear(x, w), m.in_features) for m in linears]
    inputs = {width: torch.randn(batch, width).to(dtype) for _, width in products}
    best = float("inf")
    with torch.no_grad():
        for _ in range(reps + 1):  # the first round warms up
            start = time.perf_counter()
            for product, width in products:
                product(inputs[width])
            best = min(best, time.perf_counter() - start)
    return batch / best


def prefill_seconds(model, prompts: list[list[int]], *, pad_id: int, new_tokens: int, reps: int = 2) -> float:
    """Seconds of the prefill rlvr's engine runs for these prompts (best of reps): the distinct prompts,
    left-padded, through the model's forward into a preallocated cache, last position's logits only
    (the same call as DecodeEngine._generate_chunk's; both rlvr engines run it)."""
    from rlvr.rollout.base import left_pad
    from rlvr.rollout.kv_cache import CACHE_KWARG, make_cache

    ids, mask = left_pad(list(dict.fromkeys(tuple(p) for p in prompts)), pad_id)
    best = float("inf")
    with torch.no_grad():
        for _ in range(reps):
            start = time.perf_counter()
            cache = make_cache(model.config, ids.shape[1] + new_tokens)
            model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                  **{CACHE_KWARG: cache}, use_cache=True, logits_to_keep=1)
            best = min(best, time.perf_counter() - start)
    return best


def matmul_flops(dtype: torch.dtype, n: int, reps: int = 5) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    torch.matmul(a, b)  # warm-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def raw_generate(model, prompts: list[list[int]], *, pad_id: int, eos_ids: list[int], new_tokens: int) -> int:
    """Plain `generate` on the left-padded batch; returns the number of new tokens produced."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # [n, P]
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids):] = 1
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                              temperature=1.0, top_p=1.0, top_k=0, eos_token_id=eos_ids, pad_token_id=pad_id)
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    return (out.shape[1] - width) * out.shape[0]


def vllm_generate(model, *, pad_id: int, eos_ids: list[int], seed: int):
    """A fixed-work generate on rlvr's VLLMEngine's vllm.LLM (EOS ignored, no log-probs)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from rlvr.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(model, pad_token_id=pad_id, eos_token_ids=eos_ids)

    def run(prompts: list[list[int]], new_tokens: int) -> int:
        params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=new_tokens, min_tokens=new_tokens,
                                ignore_eos=True, seed=seed)  # seeded, as the trainer samples
        outs = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return run


def run_dtype(args, dtype: str, prompts_all: list[list[int]]) -> dict:
    model, tokenizer = load_policy(str(smollm2_path()), dtype=dtype)
    model.eval()
    torch_dtype = next(model.parameters()).dtype
    params = sum(p.numel() for p in model.parameters())
    eos = eos_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id
    engine = DecodeEngine(model, pad_token_id=pad, eos_token_ids=[NEVER], max_batch_size=max(args.batch_list))
    plain_engine = DecodeEngine(model, pad_token_id=pad, eos_token_ids=[NEVER], max_batch_size=max(args.batch_list),
                                fused=False)
    engines = args.engine_list
    vllm_run = vllm_generate(model, pad_id=pad, eos_ids=eos, seed=args.seed) if "vllm" in engines else None

    def run(which: str, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        if which in ("rlvr", "rlvr-plain"):
            chosen = engine if which == "rlvr" else plain_engine
            completions = chosen.generate(prompts, max_new_tokens=new_tokens, sampling=Sampling(1.0))
            tokens = sum(len(c.token_ids) for c in completions)
        elif which == "vllm":
            tokens = vllm_run(prompts, new_tokens)
        else:
            tokens = raw_generate(model, prompts, pad_id=pad, eos_ids=eos, new_tokens=new_tokens)
        return time.perf_counter() - start, tokens

    flops_before = matmul_flops(torch_dtype, args.matmul_size)
    for which in engines:  # warm-up: first-call allocations, lazy inits
        run(which, prompts_all[:2], 8)
    rows = []
    for batch in args.batch_list:
        group = min(args.group_size, batch)
        prompts = [prompts_all[(i // group) % len(prompts_all)] for i in range(batch)]
        shape_tok_s = shape_ceiling_tok_s(model, batch, torch_dtype)
        fused_shape_tok_s = shape_ceiling_tok_s(model, batch, torch_dtype, fused=True)
        prefill_s = prefill_seconds(model, prompts, pad_id=pad, new_tokens=args.new_tokens)
        times = {which: [] for which in engines}
        tokens = {}
        for rep in range(args.repeats):
            order = engines if rep % 2 == 0 else engines[::-1]
            for which in order:
                seconds, count = run(which, prompts, args.new_tokens)
                times[which].append(seconds)
                tokens[which] = count
        for which in engines:
            expected = batch * args.new_tokens
            if tokens[which] != expected:
                print(f"warning: {which} produced {tokens[which]} tokens, expected {expected}", file=sys.stderr)
            seconds = statistics.median(times[which])
            rows.append({"dtype": dtype, "batch": batch, "engine": which, "seconds": seconds,
                         "tokens": tokens[which], "tok_s": tokens[which] / seconds, "all_seconds": times[which],
                         "shape_ceiling_tok_s": shape_tok_s, "fused_shape_ceiling_tok_s": fused_shape_tok_s,
                         "prefill_s": prefill_s})
        print(f"  [{dtype}] batch {batch:>3}: " + " | ".join(
            f"{r['engine']} {r['tok_s']:7.1f} tok/s ({r['seconds']:.1f} s)" for r in rows[-len(engines):]), flush=True)
    flops_after = matmul_flops(torch_dtype, args.matmul_size)
    ceiling = max(flops_before, flops_after)
    for row in rows:
        row["fraction_of_ceiling"] = 2 * params * row["tok_s"] / ceiling
        row["fraction_of_shape_ceiling"] = row["tok_s"] / row["shape_ceiling_tok_s"]
        row["fraction_of_fused_shape_ceiling"] = row["tok_s"] / row["fused_shape_ceiling_tok_s"]
        if row["engine"] in ("rlvr", "rlvr-plain"):  # the decoding loop alone: the call less its prefill
            row["decode_tok_s"] = row["tokens"] / max(1e-9, row["seconds"] - row["prefill_s"])
            row["decode_fraction_of_shape_ceiling"] = row["decode_tok_s"] / row["shape_ceiling_tok_s"]
    engine = model = None  # free the model before the next dtype
    return {"dtype": dtype, "params": params, "matmul_flops_before": flops_before,
            "matmul_flops_after": flops_after, "ceiling_flops": ceiling, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,4,16,64", help="comma list of batch sizes (default 1,4,16,64)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens sampled per sequence (default 64)")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma list: float32, bfloat16")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per engine and batch; median (default 1)")
    parser.add_argument("--matmul-size", type=int, default=2048, help="N of the N x N matmul ceiling (default 2048)")
    parser.add_argument("--engines", default="rlvr,rlvr-plain,hf",
                        help="comma list of rlvr, rlvr-plain (DecodeEngine(fused=False)), hf, vllm (vllm: run with "
                             ".venv-vllm/bin/python; default rlvr,rlvr-plain,hf)")
    parser.add_argument("--group-size", type=int, default=1,
                        help="each distinct prompt repeated this many times in a batch (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="smoke run: batches 1,4; 16 tokens; float32")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.new_tokens, args.dtypes = "1,4", 16, "float32"
    args.batch_list = [int(b) for b in args.batches.split(",") if b.strip()]
    args.engine_list = [e.strip() for e in args.engines.split(",") if e.strip()]
    if "hf" not in args.engine_list or set(args.engine_list) - {"rlvr", "rlvr-plain", "hf", "vllm"}:
        parser.error("--engines: a comma list of rlvr, rlvr-plain, hf, vllm that includes hf (the reference)")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(f"bench_rollout: torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
          f"{transformers.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs; "
          f"{args.new_tokens} new tokens per sequence")
    _, tokenizer = load_policy(str(smollm2_path()), dtype="float32")
    rows = load_rows(DEFAULT_DATA)
    prompts = []
    for row in rows[: max(args.batch_list)]:
        text = render_prompt(tokenizer, prompt_messages(row["prompt"], system_prompt=None,
                                                        instruction=DEFAULT_INSTRUCTION))
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    lengths = [len(p) for p in prompts]
    print(f"prompts: {len(prompts)} chain_sum prompts, {min(lengths)}-{max(lengths)} tokens")
    results = [run_dtype(args, dtype, prompts) for dtype in dtypes]

    print()
    print(f"{'dtype':<9} {'batch':>5} {'engine':<10} {'tok/s':>8} {'seconds':>8} {'of ceiling':>10} "
          f"{'of shape ceiling':>16} {'of fused shapes':>15}   engine/hf")
    for res in results:
        by_key = {(r["batch"], r["engine"]): r for r in res["rows"]}
        for batch in args.batch_list:
            for engine in args.engine_list:
                r = by_key[(batch, engine)]
                ratio = f"{r['tok_s'] / by_key[(batch, 'hf')]['tok_s']:.2f}" if engine != "hf" else ""
                shape = "" if engine != "hf" else (f"   (shape ceiling {r['shape_ceiling_tok_s']:.0f} tok/s, "
                                                   f"fused shapes {r['fused_shape_ceiling_tok_s']:.0f})")
                print(f"{res['dtype']:<9} {batch:>5} {engine:<10} {r['tok_s']:>8.1f} {r['seconds']:>8.2f} "
                      f"{100 * r['fraction_of_ceiling']:>9.2f}% {100 * r['fraction_of_shape_ceiling']:>15.1f}% "
                      f"{100 * r['fraction_of_fused_shape_ceiling']:>14.1f}%   {ratio}{shape}")
    print()
    print("rlvr's decoding loop alone (the call less its prefill, timed separately):")
    for res in results:
        for r in res["rows"]:
            if "decode_tok_s" in r:
                print(f"  {res['dtype']:<9} batch {r['batch']:>3} {r['engine']:<10} prefill {r['prefill_s']:6.2f} s of "
                      f"{r['seconds']:6.2f} s ({100 * r['prefill_s'] / r['seconds']:4.1f} %); decoding {r['decode_tok_s']:7.1f} "
                      f"tok/s = {100 * r['decode_fraction_of_shape_ceiling']:5.1f} % of the shape ceiling")
    print()
    for res in results:
        print(f"{res['dtype']}: {res['params'] / 1e6:.1f} M parameters -> {2 * res['params'] / 1e9:.3f} GFLOP/token; "
              f"matmul {args.matmul_size}^2 {res['matmul_flops_before'] / 1e9:.0f} GFLOP/s before, "
              f"{res['matmul_flops_after'] / 1e9:.0f} after (ceiling {res['ceiling_flops'] / 1e9:.0f}, "
              f"= {res['ceiling_flops'] / (2 * res['params']):.0f} tok/s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()}, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
