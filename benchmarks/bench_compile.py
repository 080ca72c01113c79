"""torch.compile as a lever for rlvr's step: the update's micro-batch and the decoding step, eager vs compiled.

Run (from the repository root, after `make setup`; a C++ compiler is needed for inductor on CPU):

    .venv/bin/python benchmarks/bench_compile.py                       # both parts, SmolLM2-135M fp32
    .venv/bin/python benchmarks/bench_compile.py --parts update --repeats 3
    .venv/bin/python benchmarks/bench_compile.py --quick               # tiny-random model, seconds

update   One micro-batch of the policy update as the trainer runs it: ``rlvr.train.batching.score``
         (shared prefix: 4 distinct prompts x 8 responses by default) + a token-mean policy-gradient
         loss + backward. "eager" is rlvr's code as it is; "compiled" is the same model with every
         decoder layer's MLP and two RMSNorms compiled by ``torch.compile(dynamic=True)`` (regional
         compilation: one graph each, shared by the 30 identical layers; the parameters stay inputs, so
         an optimiser step needs no recompile). The attention block stays eager: it reads and writes
         the KV cache by its layer index, so compiled it is a graph per layer (one recompile per
         layer; SmolLM2's first call had not ended after 7 minutes) with the cache's Python state in its guards. Each
         repeat draws new response lengths (as each training step does), so the compiled layers must
         serve new shapes without recompiling. Checked: log-probs and every
         parameter's gradient against eager's.
decode   Rollouts at --batches of distinct prompts through rlvr's engine, --steps tokens each (EOS never
         drawn): "eager" is the default CPU step (``rollout/static_decoder.py``: stacked q/k/v, oneDNN-prepacked
         weights, the static KV cache), "compiled" the same step compiled whole by the engine's
         ``capture="compile"`` (plain weights: oneDNN's packed weights cannot enter a compiled graph; attention
         lengths in buckets of 32, so a rollout meets a few shapes). Checked: rows whose tokens agree.

The first compiled call of each part is reported as compile time and not counted in the medians.
Everything runs in one process, variants alternating, so background load hits all of them. This is a
script, not a test: nothing asserts a speed. Timings on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import os

import rlvr  # noqa: F401  (before torch: rlvr's OpenMP set-up, src/rlvr/threads.py, as `rlvr train` has it)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import argparse
import copy
import json
import platform
import statistics
import sys
import time
import warnings

import torch

from rlvr.models import load_policy, smollm2_path
from rlvr.rollout import Sampling, static_decoder
from rlvr.rollout.decode_engine import DecodeEngine
from rlvr.train.batching import collate, response_logprobs


def _load(model_name: str):
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model, _ = load_policy(model_name, dtype="float32")
    return model


def _update_batch(model, *, prompts: int, group: int, prompt_len: int, completion_len: int, seed: int):
    """A collated micro-batch of ``prompts`` x ``group`` responses of random lengths in [T/2, T]."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt_rows = [torch.randint(100, vocab - 1, (prompt_len,), generator=g).tolist() for _ in range(prompts)]
    lengths = torch.randint(completion_len // 2, completion_len + 1, (prompts * group,), generator=g).tolist()
    responses = [torch.randint(100, vocab - 1, (n,), generator=g).tolist() for n in lengths]
    advantages = torch.randn(prompts * group, generator=g)
    batch = collate([p for p in prompt_rows for _ in range(group)], responses, pad_token_id=0)
    return batch, advantages


def _update_once(model, batch, advantages):
    """(forward s, backward s, log-probs) of one micro-batch; gradients stay in model's .grad."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logprobs, _ = response_logprobs(model, batch, temperature=1.0)  # [n, T]
    mask = batch.response_mask.float()
    loss = -((logprobs * advantages[:, None]) * mask).sum() / mask.sum()
    forward = time.perf_counter() - start
    start = time.perf_counter()
    loss.backward()
    return forward, time.perf_counter() - start, logprobs.detach()


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def bench_update(model, args, out: dict) -> None:
    eager = model
    compiled = copy.deepcopy(model)
    for layer in compiled.model.layers:  # not the attention: it reads the cache by layer index (a graph per layer)
        for module in (layer.input_layernorm, layer.mlp, layer.post_attention_layernorm):
            module.compile(dynamic=True)
    shape = dict(prompts=args.prompts, group=args.group, prompt_len=args.prompt_length,
                 completion_len=args.completion_length)
    print(f"\n== update: {args.prompts} prompts x {args.group} responses, prompt {args.prompt_length} tokens, "
          f"responses {args.completion_length // 2}-{args.completion_length} tokens (new lengths every repeat)",
          flush=True)
    batch, adv = _update_batch(model, seed=0, **shape)
    start = time.perf_counter()
    _update_once(compiled, batch, adv)
    compile_s = time.perf_counter() - start
    print(f"  compiled: first call (compiling) {compile_s:.1f} s", flush=True)
    rows = {"eager": {"forward": [], "backward": []}, "compiled": {"forward": [], "backward": []}}
    checks = []
    for repeat in range(args.repeats):
        batch, adv = _update_batch(model, seed=1 + repeat, **shape)
        order = ("eager", "compiled") if repeat % 2 == 0 else ("compiled", "eager")
        results = {}
        for name in order:
            forward, backward, logprobs = _update_once(eager if name == "eager" else compiled, batch, adv)
            rows[name]["forward"].append(forward)
            rows[name]["backward"].append(backward)
            results[name] = logprobs
        mask = batch.response_mask
        lp_diff = float((results["eager"] - results["compiled"])[mask].abs().max())
        ge, gc = _grads(eager).double(), _grads(compiled).double()
        cosine = float(torch.nn.functional.cosine_similarity(ge, gc, dim=0))
        rel = float((ge - gc).norm() / ge.norm())
        checks.append({"logprob_max_abs_diff": lp_diff, "grad_cosine": cosine, "grad_rel_diff": rel,
                       "tokens": int(mask.sum())})
        print(f"  repeat {repeat + 1}: {int(mask.sum())} response tokens, width {batch.response_width}; "
              + "; ".join(f"{n} {rows[n]['forward'][-1]:.2f} + {rows[n]['backward'][-1]:.2f} s" for n in rows)
              + f"; log-prob max diff {lp_diff:.1e}, grad cosine {cosine:.6f}, rel diff {rel:.1e}", flush=True)
    med = {n: {k: statistics.median(v) for k, v in parts.items()} for n, parts in rows.items()}
    total = {n: med[n]["forward"] + med[n]["backward"] for n in med}
    print(f"  median forward + backward: eager {med['eager']['forward']:.2f} + {med['eager']['backward']:.2f} = "
          f"{total['eager']:.2f} s; compiled {med['compiled']['forward']:.2f} + {med['compiled']['backward']:.2f} = "
          f"{total['compiled']:.2f} s; eager / compiled = {total['eager'] / total['compiled']:.2f}x", flush=True)
    out["update"] = {"shape": shape, "compile_s": compile_s, "runs": rows, "median": med,
                     "speedup": total["eager"] / total["compiled"], "checks": checks}


def _rollout(engine, model, batch: int, *, prompt_len: int, steps: int, seed: int):
    """Seconds and tokens of one rollout of ``steps`` tokens for ``batch`` distinct prompts (EOS never drawn)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(100, model.config.vocab_size - 1, (batch, prompt_len), generator=g).tolist()
    start = time.perf_counter()
    out = engine.generate(prompts, max_new_tokens=steps, sampling=Sampling(1.0), row_seeds=list(range(batch)))
    return time.perf_counter() - start, [c.token_ids for c in out]


def bench_decode(model, args, out: dict) -> None:
    """The engine's static step eager (oneDNN-prepacked weights) against the same step compiled whole
    (``capture="compile"``, plain weights: a compiled graph cannot take prepacked ones)."""
    if not static_decoder.supports(model):
        print("\n== decode: skipped, the model is not one the static step supports", flush=True)
        return
    out["decode"] = {}
    never = [model.config.vocab_size]  # an EOS id no draw equals: fixed work
    engines = {"eager": DecodeEngine(model, pad_token_id=0, eos_token_ids=never, compact_below=0),
               "compiled": DecodeEngine(model, pad_token_id=0, eos_token_ids=never, compact_below=0,
                                        capture="compile", kv_bucket=32)}
    for batch in args.batches:
        print(f"\n== decode: batch {batch}, prompt {args.prompt_length} tokens, {args.steps} steps", flush=True)
        compile_s, _ = _rollout(engines["compiled"], model, batch, prompt_len=args.prompt_length, steps=args.steps,
                                seed=99)
        print(f"  compiled: first rollout (compiling) {compile_s:.1f} s", flush=True)
        per_token = {name: [] for name in engines}
        tokens = {}
        for repeat in range(args.repeats):
            for name in (engines if repeat % 2 == 0 else list(reversed(engines))):
                seconds, tokens[name] = _rollout(engines[name], model, batch, prompt_len=args.prompt_length,
                                                 steps=args.steps, seed=batch)
                per_token[name].append(seconds / args.steps)
        same = sum(a == b for a, b in zip(tokens["eager"], tokens["compiled"]))
        med = {n: statistics.median(v) for n, v in per_token.items()}
        print("  median ms per position: " + ", ".join(f"{n} {1000 * med[n]:.1f}" for n in med)
              + f"; eager / compiled {med['eager'] / med['compiled']:.2f}x; rows with the same tokens {same}/{batch}",
              flush=True)
        out["decode"][str(batch)] = {"compile_s": compile_s, "per_position_s": per_token, "median_s": med,
                                     "same_rows": same}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="update,decode", help="update, decode (default both)")
    parser.add_argument("--model", default=None, help="model alias or folder (default SmolLM2-135M)")
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts per micro-batch (default 4)")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt (default 8)")
    parser.add_argument("--prompt-length", type=int, default=65, help="prompt tokens (default 65, chain_sum)")
    parser.add_argument("--completion-length", type=int, default=128,
                        help="longest response of the update batch (default 128)")
    parser.add_argument("--batches", default="16,64", help="decoding batches (default 16,64)")
    parser.add_argument("--steps", type=int, default=24, help="decoding steps per timed call (default 24)")
    parser.add_argument("--repeats", type=int, default=2, help="repeats of each variant; medians (default 2)")
    parser.add_argument("--quick", action="store_true", help="tiny-random model, small shapes")
    parser.add_argument("--json", default=None, help="also write every timing to this file")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"update", "decode"}
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}; choose from update, decode")
    if args.quick:
        args.model = args.model or "tiny-random"
        args.completion_length, args.batches, args.steps = 16, [4], 6
    warnings.filterwarnings("ignore")
    torch._dynamo.config.cache_size_limit = 64
    model = _load(args.model or str(smollm2_path()))
    model.eval()  # no dropout in these models; eval() as the trainer's scoring has it
    print(f"bench_compile: {args.model or 'SmolLM2-135M-Instruct'}, fp32, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), {platform.processor() or platform.machine()}", flush=True)
    out: dict = {"torch": torch.__version__, "threads": torch.get_num_threads(), "args": vars(args)}
    if "update" in parts:
        bench_update(model, args, out)
    if "decode" in parts:
        bench_decode(model, args, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
