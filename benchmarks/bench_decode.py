"""Rollouts against the GPU's limit: rlvr's decoding loop per step mode, and the update, against the hardware's peaks.

Run on the lent GPU machine (docs/scaling.md, "The decoding benchmark"; nothing to install, no tokenizer):

    PYTHONPATH=$PWD/src python3 benchmarks/bench_decode.py --out decode_out

and here, to check the script on tiny shapes (tests/test_bench_decode.py runs this):

    .venv/bin/python benchmarks/bench_decode.py --device cpu --out /tmp/bench_decode_cpu

Decoding settings, each in a process of its own (a process's first rollout is one of the numbers), each the
trainer's engine (``rlvr.rollout.decode_engine.DecodeEngine``) as a run builds it, differing in one argument:

  forward        ``fused=False``: every position through the model's own forward (transformers' code), eager
  eager          the static step (``rollout/static_decoder.py``) launched op by op
  graph          the static step recorded once per attention-length bucket and replayed as CUDA graphs (the
                 CUDA default)
  compile        the static step compiled whole (``torch.compile(fullgraph=True)``), not recorded
  compile+graph  the compiled step, recorded and replayed

The model is a Qwen2 of Qwen2.5-1.5B's shape with random weights, fp32 master weights generating under bf16
autocast (what ``bf16=true`` runs); 8 distinct prompts of 128 random token ids x 8 responses = 64 rows; T = 512
new tokens each (EOS never drawn: the work is fixed); temperature 1, per-row seeds. Per setting:

  first_s / later_s  the process's first rollout, and the median of the next two (seconds)
  prefill_s          the prompts' forward alone (the rollout's part that is not decoding)
  ms_per_position    (later_s - prefill_s) / (T - 1): one decoding step of all 64 rows, at steady state
  must_move_gb       the bytes one step has to read at least: every weight the step multiplies by, in the
                     compute dtype, plus the keys and values of the filled cache (mean length P + T/2)
  roofline           must_move_gb / (HBM peak x the step's time): the fraction of the memory-bandwidth limit
  gpu_busy           the share of a 64-position rollout's wall time with a kernel running (torch.profiler)
  same_tokens        rows whose 512 tokens equal the ``forward`` setting's (same seeds; float differences can
                     move a draw that falls on a CDF boundary)
  ops/pos            operations the host dispatches per position (forward and eager; a graph replays them with
                     one launch, a compiled step runs fused kernels)

Update settings, two training steps of rlvr's Trainer at the same shape (``benchmarks/gpu_check.py``'s model,
rows and reward; its kit tokenizer), the second timed: update seconds, update tokens/s (each group's prompt
once and every response: what the update's forward reads), MFU = 6 x parameters x tokens/s / the bf16 dense
peak. ``update-ckpt``: the GPU check's stack (bf16 autocast over fp32 weights, gradient checkpointing, the
chunked head); ``update``: the same without recomputation; ``update-bf16``: plain bf16 weights (no autocast
casts, no fp32 master weights): an upper bound on what casting the weights once per update could save.

Peaks: ``--hbm-tb-s`` (default 4.8, the H200's) and ``--bf16-tflops`` (default 989, the H200's dense bf16).
``--device cpu`` is the dry run: a 2-layer model, 2 x 4 rows, T = 16, the forward/eager/compile settings and both
update settings; it checks the code path, not the numbers. This is a script, not a test: it asserts no speed.
Exit code 1 if a setting failed, 2 without a CUDA device (unless --device cpu).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # gpu_check: the model shapes, rows, reward and trainer steps

from gpu_check import fmt  # (after the path: a script beside this one)

DECODE = ("forward", "eager", "graph", "compile", "compile+graph")
UPDATE = {  # the trainer options each update setting changes from gpu_check's stack (bf16=true over fp32 weights)
    "update-ckpt": {"gradient_checkpointing": True},
    "update": {"gradient_checkpointing": False},
    "update-bf16": {"gradient_checkpointing": True, "dtype": "bfloat16", "bf16": False},
}
GPU_DEFAULT = ("graph", "eager", "forward", "compile+graph", *UPDATE)
CPU_DEFAULT = ("forward", "eager", "compile", *UPDATE)


# --------------------------------------------------------------------------- decoding
def decode_model(args):
    """gpu_check's Qwen2 of the 1.5B shape (tiny in the dry run), fp32 master weights, on the device."""
    import gpu_check

    if args.layers:  # the same layer kind, fewer or more of them (a dry run that counts operations at 28 layers)
        gpu_check.TINY["num_hidden_layers"] = gpu_check.QWEN["1.5B"]["num_hidden_layers"] = args.layers
    return gpu_check.random_model("1.5B", args, torch.float32)  # (its dry-run device marks are inert here)


def prompts(args, vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(args.seed)
    distinct = [torch.randint(0, vocab, (args.prompt_length,), generator=generator).tolist()
                for _ in range(args.prompts)]
    return [p for p in distinct for _ in range(args.generations)]


def synchronize(args) -> None:
    if args.cuda:
        torch.cuda.synchronize()


def must_move_bytes(decoder, model, args) -> float:
    """Bytes one decoding step reads at least: the products' weights in the compute dtype, the embedding rows
    and norms it touches (small), and the filled keys/values (mean filled length P + T/2)."""
    weights = sum(p.weight.numel() * p.weight.element_size() + (p.bias.numel() * p.bias.element_size()
                                                                  if p.bias is not None else 0)
                  for layer in decoder.layers for p in layer.values())
    weights += decoder.head.weight.numel() * decoder.head.weight.element_size()
    config = model.config
    rows = args.prompts * args.generations
    kv = (2 * config.num_hidden_layers * rows * config.num_key_value_heads * decoder.head_dim
          * (args.prompt_length + args.completion_length / 2) * torch.tensor([], dtype=decoder.dtype).element_size())
    return weights + kv


def gpu_busy_share(engine, batch, args, sampling) -> float | None:
    """Kernel time over wall time for a 64-position rollout (after one unprofiled call of the same shape)."""
    if not args.cuda:
        return None
    from torch.profiler import ProfilerActivity, profile

    positions = min(64, args.completion_length)
    seeds = list(range(len(batch)))
    engine.generate(batch, max_new_tokens=positions, sampling=sampling, row_seeds=seeds)
    synchronize(args)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        engine.generate(batch, max_new_tokens=positions, sampling=sampling, row_seeds=seeds)
        synchronize(args)
    wall = time.perf_counter() - start
    kernels = sum(e.device_time_total for e in profiler.key_averages() if e.device_type.name == "CUDA") / 1e6
    return min(1.0, kernels / wall)


def operations_per_position(engine, batch, args, sampling) -> float:
    """Operations the host dispatches per decoding position (aten calls, counted by a dispatch mode): the
    difference between rollouts of 8 and 4 tokens, over 4."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for tokens in (4, 8):
        Count.calls = 0
        with Count():
            engine.generate(batch, max_new_tokens=tokens, sampling=sampling, row_seeds=list(range(len(batch))))
        counts.append(Count.calls)
    return (counts[1] - counts[0]) / 4


def run_decode(args, setting: str, record: dict) -> None:
    from rlvr.parallel.runtime import autocast
    from rlvr.rollout import Sampling
    from rlvr.rollout.decode_engine import DecodeEngine

    model = decode_model(args)
    vocab = model.config.vocab_size
    batch = prompts(args, vocab)
    options = {"fused": False} if setting == "forward" else {"capture": setting}
    options["compact_below"] = 0  # no row ever finishes here: a fixed batch in every setting
    if setting != "forward" and args.tiny:
        options["kv_bucket"] = 8  # the dry run's T = 16 meets several buckets, as a GPU rollout does
    engine = DecodeEngine(model, pad_token_id=0, eos_token_ids=[vocab], max_batch_size=len(batch), **options)
    sampling, seeds, T = Sampling(1.0), list(range(len(batch))), args.completion_length
    record.update(rows=len(batch), prompt_length=args.prompt_length, completion_length=T, options=options)
    times, outputs = [], None
    with autocast(args.device, "bfloat16"):
        for _ in range(3):
            synchronize(args)
            start = time.perf_counter()
            out = engine.generate(batch, max_new_tokens=T, sampling=sampling, row_seeds=seeds)
            synchronize(args)
            times.append(time.perf_counter() - start)
            outputs = outputs or out
        with torch.no_grad():
            unique = torch.tensor(batch[:: args.generations], device=args.device)
            synchronize(args)
            start = time.perf_counter()
            model(input_ids=unique, logits_to_keep=1)
            synchronize(args)
            prefill = time.perf_counter() - start
        if setting in ("forward", "eager"):  # (a compiled step would be traced again for the new lengths)
            record["operations_per_position"] = operations_per_position(engine, batch, args, sampling)
        try:  # a profiler that cannot attribute kernels costs this number only
            record["gpu_busy"] = gpu_busy_share(engine, batch, args, sampling)
        except Exception as error:  # noqa: BLE001
            record.update(gpu_busy=None, gpu_busy_error=f"{type(error).__name__}: {error}")
        decoder = engine._decoder
        if decoder is None:  # forward: the static step's arithmetic for its bytes (the same products)
            from rlvr.rollout.static_decoder import StaticDecoder

            decoder = StaticDecoder(model, prepack=False)
        must_move = must_move_bytes(decoder, model, args)
    later = statistics.median(times[1:])
    per_position = (later - prefill) / (T - 1)
    record.update(first_s=times[0], later_s=later, first_over_later=times[0] / later, prefill_s=prefill,
                  ms_per_position=per_position * 1e3, must_move_gb=must_move / 1e9,
                  roofline=must_move / (args.hbm_tb_s * 1e12) / per_position,
                  tokens=[c.token_ids for c in outputs], all_full=all(len(c.token_ids) == T for c in outputs))
    if "graph" in setting:  # how many graphs, and whether a failed recording left a runner eager (a warning too)
        runners = [s.runner for w in engine._workspaces.values() for s in w.steppers.values()]
        record["graphs_recorded"] = sum(r.captures for r in runners)
        record["modes_at_end"] = sorted({r.mode for r in runners})


# --------------------------------------------------------------------------- the update
def run_update(args, setting: str, record: dict) -> None:
    import gpu_check

    gc_args = gpu_check.parse_args(["--device", args.device, "--tokenizer", args.tokenizer, "--out", args.out,
                                    "--completion-length", str(args.completion_length)])
    gpu_check.quiet_libraries()
    gpu_check.register_models(gc_args)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench_decode_") as work:
        gc_args.work = Path(work)
        gpu_check.rlvr_steps(gc_args, setting, 2, record, lambda: None, **UPDATE[setting])
    step = record["steps"][-1]
    # the tokens the update's forward reads: each group's prompt once (shared prefix) and every response
    tokens = gc_args.prompts * _prompt_tokens(gpu_check, gc_args) + gc_args.prompts * gc_args.generations * \
        step["completions/mean_length"]
    n = _parameters(gpu_check.model_config("1.5B", gc_args))
    update_s = step["time/update_s"]
    record.update(update_s=update_s, update_tokens=tokens, update_tokens_per_s=tokens / update_s,
                  mfu=6 * n * tokens / update_s / (args.bf16_tflops * 1e12), parameters=n,
                  step_s=step["time/step_s"], rollout_s=step["time/rollout_s"])


def _prompt_tokens(gpu_check, gc_args) -> float:
    """The mean length of gpu_check's chat prompts, as the trainer renders them."""
    from rlvr.data import prompt_messages

    data = gpu_check.rlvr_config(gc_args, "prompts").data
    lengths = [len(gc_args.tokenizer_object.apply_chat_template(
        prompt_messages(row["question"], system_prompt=data.system_prompt, instruction=data.instruction),
        add_generation_prompt=True, tokenize=True)) for row in gc_args.rows[: gc_args.prompts]]
    return statistics.fmean(lengths)


def _parameters(config) -> int:
    """Parameters of a Qwen2 config (tied embeddings counted once): the 6N of MFU."""
    h, i, L, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = h * (h + 2 * kv) + (h + 2 * kv) + h * h + 3 * h * i + 2 * h
    return L * per_layer + v * h * (1 if config.tie_word_embeddings else 2) + h


# --------------------------------------------------------------------------- processes and the report
def run_child(args) -> int:
    record = {"setting": args.child, "status": "running"}
    try:
        (run_decode if args.child in DECODE else run_update)(args, args.child, record)
        record["status"] = "done"
    except Exception as error:  # noqa: BLE001  (recorded, and the exit code says it)
        record.update(status="failed", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
    Path(args.out, f"{args.child}.json").write_text(json.dumps(record, default=str))
    return 0 if record["status"] == "done" else 1


def run_setting(argv: list[str], setting: str, args) -> dict:
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--child", setting],
                       timeout=args.budget_s, check=False)
    except subprocess.TimeoutExpired:
        return {"setting": setting, "status": "cut", "error": f"cut at its budget of {args.budget_s:.0f} s"}
    path = Path(args.out, f"{setting}.json")
    record = json.loads(path.read_text()) if path.exists() else {"setting": setting, "status": "failed",
                                                                 "error": "the process wrote no record"}
    record["wall_s"] = time.perf_counter() - start
    return record


def table(results: dict) -> str:
    forward = (results.get("forward") or {}).get("tokens")
    header = (f"{'setting':<14} {'status':<7} {'first s':>8} {'later s':>8} {'first/later':>11} {'ms/pos':>8} "
              f"{'roofline':>8} {'gpu busy':>8} {'same tokens':>11} {'ops/pos':>8}")
    lines = [header]
    for name, r in results.items():
        if name in UPDATE:
            lines.append(f"{name:<14} {r['status']:<7} update {fmt(r.get('update_s'))} s, "
                         f"{fmt(r.get('update_tokens_per_s'), '.0f')} tokens/s, MFU {fmt(r.get('mfu'), '.3f')}; "
                         f"step {fmt(r.get('step_s'))} s (rollout {fmt(r.get('rollout_s'))} s)")
        else:
            same = None
            if forward and r.get("tokens"):
                same = f"{sum(a == b for a, b in zip(r['tokens'], forward))}/{len(forward)}"
            lines.append(f"{name:<14} {r['status']:<7} {fmt(r.get('first_s')):>8} {fmt(r.get('later_s')):>8} "
                         f"{fmt(r.get('first_over_later')):>11} {fmt(r.get('ms_per_position'), '.2f'):>8} "
                         f"{fmt(r.get('roofline'), '.3f'):>8} {fmt(r.get('gpu_busy'), '.2f'):>8} {same or '-':>11} "
                         f"{fmt(r.get('operations_per_position'), '.0f'):>8}")
        if r.get("error"):
            lines.append(f"  {r['error'].splitlines()[0][:300]}")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the settings' JSON and bench_decode.json")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: the dry run (tiny shapes)")
    parser.add_argument("--settings", help=f"comma list of {', '.join((*DECODE, *UPDATE))} (default: "
                        f"{','.join(GPU_DEFAULT)} on CUDA, {','.join(CPU_DEFAULT)} on CPU)")
    parser.add_argument("--completion-length", type=int, help="T (default 512 on CUDA, 16 on CPU)")
    parser.add_argument("--tokenizer", default="kit/tokenizer", help="the update settings' tokenizer folder "
                        "(benchmarks/gpu_kit.sh makes kit/tokenizer)")
    parser.add_argument("--budget-s", type=float, default=240.0, help="seconds per setting before it is cut")
    parser.add_argument("--hbm-tb-s", type=float, default=4.8, help="HBM peak, TB/s (default 4.8: H200)")
    parser.add_argument("--bf16-tflops", type=float, default=989.0, help="dense bf16 peak (default 989: H200)")
    parser.add_argument("--layers", type=int, help="decoder layers of the decoding settings' model (default: the "
                        "shape's, 28 on CUDA, 2 in the dry run; --device cpu --layers 28 counts the 1.5B's operations)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cuda = args.device == "cuda"
    args.tiny = not args.cuda
    defaults = GPU_DEFAULT if args.cuda else CPU_DEFAULT
    args.settings = [s.strip() for s in (args.settings or ",".join(defaults)).split(",") if s.strip()]
    unknown = sorted(set(args.settings) - {*DECODE, *UPDATE})
    if unknown:
        parser.error(f"--settings: unknown {unknown}; choose from {', '.join((*DECODE, *UPDATE))}")
    if not args.cuda and {"graph", "compile+graph"} & set(args.settings):
        parser.error("--settings: the graph settings record CUDA graphs; on --device cpu use forward, eager, compile")
    args.prompts, args.generations = (8, 8) if args.cuda else (2, 4)
    args.prompt_length = 128 if args.cuda else 6
    args.completion_length = args.completion_length or (512 if args.cuda else 16)
    if set(args.settings) & set(UPDATE) and not Path(args.tokenizer).is_dir():
        parser.error(f"--tokenizer {args.tokenizer}: no such folder (the update settings need one; bash "
                     "benchmarks/gpu_kit.sh makes kit/tokenizer)")
    return args


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.cuda and not torch.cuda.is_available():
        print(f"bench_decode: torch {torch.__version__} sees no CUDA device; on a CPU add --device cpu", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.child:
        return run_child(args)
    device = torch.cuda.get_device_name() if args.cuda else "cpu (dry run: tiny shapes)"
    print(f"bench_decode: {device}, torch {torch.__version__}; {', '.join(args.settings)}", flush=True)
    results = {}
    for setting in args.settings:
        results[setting] = run_setting(argv, setting, args)
        print(f"[{setting}] {results[setting]['status']} in {fmt(results[setting].get('wall_s'), '.0f')} s", flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "device": device, "torch": torch.__version__,
              "peaks": {"hbm_tb_s": args.hbm_tb_s, "bf16_tflops": args.bf16_tflops}, "results": results}
    Path(args.out, "bench_decode.json").write_text(json.dumps(report, indent=1, default=str))
    print("\n" + table(results) + f"\n\nwrote {Path(args.out, 'bench_decode.json')}")
    return 1 if any(r["status"] != "done" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
