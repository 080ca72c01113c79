"""Peak memory and time of one policy update under rlvr's memory options, side by side.

    python benchmarks/bench_memory.py                                  # Qwen2.5-0.5B's shape, 8 x 1024 tokens
    python benchmarks/bench_memory.py --layers 4 --responses 4 --tokens 256   # a smaller run

The model has Qwen2.5-0.5B's real shape (hidden 896, 24 layers, 14/2 heads, intermediate 4864,
vocab 151,936, tied embeddings), random weights built in-process from the config (nothing is
downloaded); ``--layers`` cuts the depth for a quick run. The batch: ``--responses`` responses of
``--tokens`` tokens in groups of 4 sharing a 64-token prompt, one micro-batch, one AdamW step
(`PolicyUpdate`, the trainer's own update). Each configuration runs in its own process, so its peak
is its own:

- ``plain``: fp32, logits [n, T, V];
- ``+chunked head``: ``lm_head_chunk_tokens=1024``;
- ``+checkpointing``: and ``gradient_checkpointing=true``;
- ``+bf16 mixed``: and ``bf16=true``.

Peak memory: on CPU the process's peak RSS (``ru_maxrss``), also shown above the RSS just before the
update (weights allocated, optimiser states not yet); on CUDA ``torch.cuda.max_memory_allocated``.
Times are of the update alone (forward, backward, optimiser step). Ratios are to ``plain`` of the
same run. Run it alone: on 2 shared cores anything beside it is measured too.
TRL's GRPOTrainer on the same shape is not part of this script yet (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CONFIGS = {
    "plain": {},
    "+chunked head": {"lm_head_chunk_tokens": 1024},
    "+checkpointing": {"lm_head_chunk_tokens": 1024, "gradient_checkpointing": True},
    "+bf16 mixed": {"lm_head_chunk_tokens": 1024, "gradient_checkpointing": True, "bf16": True},
}
PROMPT_TOKENS = 64
GROUP = 4


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def run_one(name: str, args) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlvr.config import build_config
    from rlvr.models.checkpointing import enable_activation_checkpointing
    from rlvr.rollout import Completion
    from rlvr.train.experience import Experience, Group
    from rlvr.train.plan import compile_plan
    from rlvr.train.update import PolicyUpdate

    options = CONFIGS[name]
    device = torch.device(args.device)
    config = Qwen2Config(hidden_size=896, num_hidden_layers=args.layers, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device).eval()
    if options.get("gradient_checkpointing"):
        enable_activation_checkpointing(model)
    cfg = build_config({"model": "tiny-random", "prompts_per_step": args.responses // GROUP, "num_generations": GROUP,
                        "max_completion_length": args.tokens, **options})
    gen = torch.Generator().manual_seed(1)
    groups = []
    for g in range(args.responses // GROUP):
        prompt = torch.randint(0, config.vocab_size, (PROMPT_TOKENS,), generator=gen).tolist()
        completions = [Completion(torch.randint(0, config.vocab_size, (args.tokens,), generator=gen).tolist(),
                                  [0.0] * args.tokens, False) for _ in range(GROUP)]
        groups.append(Group(group_id=g + 1, row={"id": str(g)}, prompt_ids=prompt, completions=completions,
                            texts=[""] * GROUP, rewards=[1.0, 0.0, 0.5, 0.25]))
    exp = Experience.from_groups(groups)
    advantages = torch.linspace(-1, 1, len(exp))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    update = PolicyUpdate(compile_plan(cfg).update, model, optimizer, scheduler, pad_token_id=0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.synchronize(device)
    before = _rss_gb()
    t0 = time.perf_counter()
    result = update(exp, advantages)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    out = {"name": name, "update_s": seconds, "rss_before_gb": before,
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "loss": result.loss, "grad_norm": result.grad_norms[0] if result.grad_norms else None}
    if device.type == "cuda":
        out["cuda_peak_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--responses", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma list of the configurations to run (bf16 autocast is ~50x slower on CPUs "
                             "without bf16 matrix units: measured 395 s vs 7.4 s at 2 layers, 4 x 64 tokens)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    if args.responses % GROUP:
        parser.error(f"--responses must be a multiple of {GROUP}")
    if args.one:
        print(json.dumps(run_one(args.one, args)))
        return
    rows = []
    names = [n.strip() for n in args.configs.split(",")]
    if unknown := [n for n in names if n not in CONFIGS]:
        parser.error(f"unknown configuration(s) {unknown}; choose from {list(CONFIGS)}")
    for name in names:
        cmd = [sys.executable, __file__, "--one", name, "--layers", str(args.layers), "--responses",
               str(args.responses), "--tokens", str(args.tokens), "--device", args.device]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  {name}: {rows[-1]}", flush=True)
    plain = rows[0]
    key = "cuda_peak_gb" if "cuda_peak_gb" in plain else "peak_rss_gb"
    print(f"\nQwen2.5-0.5B shape, {args.layers} layers, {args.responses} x {args.tokens} response tokens, "
          f"{args.device}; peak = {key}")
    print("| configuration | peak GB | × plain | above pre-update RSS GB | × plain | update s | × plain |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        above, plain_above = r["peak_rss_gb"] - r["rss_before_gb"], plain["peak_rss_gb"] - plain["rss_before_gb"]
        print(f"| {r['name']} | {r[key]:.2f} | {r[key] / plain[key]:.2f} | {above:.2f} | {above / plain_above:.2f} "
              f"| {r['update_s']:.1f} | {r['update_s'] / plain['update_s']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
