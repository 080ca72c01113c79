"""Peak memory and time of one policy update under rlvr's memory options, side by side.

    python benchmarks/bench_memory.py                                  # Qwen2.5-0.5B's shape, 8 x 1024 tokens
    python benchmarks/bench_memory.py --layers 4 --responses 4 --tokens 256   # a smaller run

The model has Qwen2.5-0.5B's real shape (hidden 896, 24 layers, 14/2 heads, intermediate 4864,
vocab 151,936, tied embeddings), random weights built in-process from the config (nothing is
downloaded); ``--layers`` cuts the depth for a quick run. The batch: ``--responses`` responses of
``--tokens`` tokens in groups of 4 sharing a 64-token prompt, one micro-batch, one AdamW step
(`PolicyUpdate` and `build_optimizer`, the trainer's own: fused AdamW, ``optim``'s default). Each
configuration runs in its own process, so its peak is its own:

- ``plain``: fp32, logits [n, T, V];
- ``+chunked head``: ``lm_head_chunk_tokens=1024`` (``--head-chunks 256,512,...`` runs each configuration
  with a chunked head once per chunk size instead, to tune it);
- ``+checkpointing``: and ``gradient_checkpointing=true``;
- ``+bf16 mixed``: and ``bf16=true``;
- ``TRL GRPOTrainer``: TRL's own update on the same model and batch: ``GRPOConfig`` at its defaults
  (``gradient_checkpointing=True``, ``loss_type="dapo"``, ``beta=0``, its fused AdamW) except
  ``per_device_train_batch_size`` = ``--responses``, ``num_generations=4``, ``max_completion_length`` =
  ``--tokens``, lr 1e-6, and ``bf16``: TRL's default ``True`` on CUDA, ``False`` on CPU (bf16 autocast
  is ~50x slower on CPUs without bf16 matrix units), so on CPU it is compared with rlvr's fp32 rows. The
  step is the one ``Trainer.training_step`` takes once generation is done: ``compute_loss`` under
  ``compute_loss_context_manager``, ``accelerator.backward``, ``optimizer.step`` — with checkpointing
  switched on as ``Trainer.train`` does (``activation_checkpointing_enable``), and ``model.train()``.

Peak memory: on CPU the process's peak RSS (``ru_maxrss``), also shown above the RSS just before the
update (weights allocated, optimiser states not yet); on CUDA ``torch.cuda.max_memory_allocated``.
Times are of the update alone (forward, backward, optimiser step). Ratios are to ``plain`` of the
same run. Run it alone: on 2 shared cores anything beside it is measured too.
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
    "TRL GRPOTrainer": None,  # run by run_trl
}
PROMPT_TOKENS = 64
GROUP = 4


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def _model(args):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=896, num_hidden_layers=args.layers, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(torch.device(args.device)).eval()


def _batch(args, vocab_size: int) -> list[tuple[list[int], list[list[int]]]]:
    """``--responses // 4`` groups: a 64-token prompt and 4 responses of ``--tokens`` tokens each."""
    import torch

    gen = torch.Generator().manual_seed(1)
    return [(torch.randint(0, vocab_size, (PROMPT_TOKENS,), generator=gen).tolist(),
             [torch.randint(0, vocab_size, (args.tokens,), generator=gen).tolist() for _ in range(GROUP)])
            for _ in range(args.responses // GROUP)]


def _measure(device, step) -> dict:
    """Peak memory and seconds of ``step()`` (which returns a dict of its own numbers)."""
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.synchronize(device)
    before = _rss_gb()
    t0 = time.perf_counter()
    out = step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out.update(update_s=time.perf_counter() - t0, rss_before_gb=before,
               peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    if device.type == "cuda":
        out["cuda_peak_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def run_trl(args) -> dict:
    import tempfile

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models.loading import load_policy

    device = torch.device(args.device)
    model = _model(args)
    tokenizer = load_policy("tiny-random")[1]  # any tokenizer: the batch is token ids already
    with tempfile.TemporaryDirectory() as out:
        targs = GRPOConfig(output_dir=out, report_to=[], use_cpu=device.type == "cpu", bf16=device.type == "cuda",
                           per_device_train_batch_size=args.responses, num_generations=GROUP,
                           max_completion_length=args.tokens, learning_rate=1e-6, save_strategy="no")
        trainer = GRPOTrainer(model=model, args=targs, processing_class=tokenizer,
                              reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                              train_dataset=Dataset.from_list([{"prompt": "x"}] * args.responses))
    model = trainer.model
    assert targs.gradient_checkpointing  # TRL's default
    model.activation_checkpointing_enable(activation_checkpointing_kwargs=targs.gradient_checkpointing_kwargs or None)
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    optimizer = trainer.create_optimizer()
    groups = _batch(args, model.config.vocab_size)
    prompts = torch.tensor([p for p, responses in groups for _ in responses], device=device)
    completions = torch.tensor([r for _, responses in groups for r in responses], device=device)
    inputs = {"prompt_ids": prompts, "prompt_mask": torch.ones_like(prompts), "completion_ids": completions,
              "completion_mask": torch.ones_like(completions),
              "advantages": torch.linspace(-1, 1, len(completions), device=device),
              "num_items_in_batch": torch.tensor(float(completions.numel()), device=device)}

    def step() -> dict:
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), targs.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        return {"loss": float(loss), "grad_norm": float(grad_norm)}

    return {"name": "TRL GRPOTrainer", **_measure(device, step)}


def run_one(name: str, args) -> dict:
    import torch

    if name == "TRL GRPOTrainer":
        return run_trl(args)
    from rlvr.config import build_config
    from rlvr.models.activation_checkpointing import enable_activation_checkpointing
    from rlvr.rollout import Completion
    from rlvr.train.experience import Experience
    from rlvr.train.plan import compile_plan
    from rlvr.train.rollout_phase import Group
    from rlvr.train.setup import build_optimizer
    from rlvr.train.update import PolicyUpdate

    options = dict(CONFIGS[name])
    if "lm_head_chunk_tokens" in options:
        options["lm_head_chunk_tokens"] = args.head_chunk
    device = torch.device(args.device)
    model = _model(args)
    if options.get("gradient_checkpointing"):
        enable_activation_checkpointing(model)
    cfg = build_config({"model": "tiny-random", "prompts_per_step": args.responses // GROUP, "num_generations": GROUP,
                        "max_completion_length": args.tokens, "learning_rate": 1e-6, **options})
    groups = [Group(group_id=g + 1, row={"id": str(g)}, prompt_ids=prompt,
                    completions=[Completion(r, [0.0] * len(r), False) for r in responses],
                    texts=[""] * GROUP, rewards=[1.0, 0.0, 0.5, 0.25])
              for g, (prompt, responses) in enumerate(_batch(args, model.config.vocab_size))]
    exp = Experience.from_groups(groups)
    advantages = torch.linspace(-1, 1, len(exp))
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], cfg.optim)  # the trainer's
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    update = PolicyUpdate(compile_plan(cfg).update, model, optimizer, scheduler, pad_token_id=0)

    def step() -> dict:
        result = update(exp, advantages)
        return {"loss": result.loss, "grad_norm": result.grad_norms[0] if result.grad_norms else None}

    return {"name": name, **_measure(device, step)}


def _run_child(cmd: list[str], max_rss_gb: float) -> dict | None:
    """Run one configuration in its own process; None if its RSS passed ``max_rss_gb`` (it is stopped)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    page = os.sysconf("SC_PAGE_SIZE")
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/statm") as f:
                rss_gb = int(f.read().split()[1]) * page / 2**30
        except (FileNotFoundError, ProcessLookupError):
            break
        if rss_gb > max_rss_gb:
            proc.kill()
            proc.communicate()
            return None
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{cmd[3]} failed:\n{stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _ratio(value: float, base: dict | None, key: str) -> str:
    return f"{value / base[key]:.2f}" if base and base.get(key) else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--responses", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="comma list of the configurations to run (bf16 autocast is ~50x slower on CPUs "
                             "without bf16 matrix units: measured 395 s vs 7.4 s at 2 layers, 4 x 64 tokens)")
    total_gb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    parser.add_argument("--max-rss-gb", type=float, default=round(0.85 * total_gb, 1),
                        help="stop a configuration whose RSS passes this (it did not fit); default 85%% of RAM")
    parser.add_argument("--head-chunks", default="1024",
                        help="comma list of lm_head_chunk_tokens values for the configurations with a chunked "
                             "head, each run once per value (default 1024)")
    parser.add_argument("--head-chunk", type=int, default=1024, help=argparse.SUPPRESS)
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
    try:
        chunks = [int(c) for c in args.head_chunks.split(",")]
    except ValueError:
        parser.error(f"--head-chunks: comma list of positive integers, got {args.head_chunks!r}")
    if any(c <= 0 for c in chunks):
        parser.error(f"--head-chunks: chunk sizes must be > 0, got {args.head_chunks!r}")
    for name in names:
        for chunk in chunks if "lm_head_chunk_tokens" in (CONFIGS[name] or {}) else [None]:
            cmd = [sys.executable, __file__, "--one", name, "--layers", str(args.layers), "--responses",
                   str(args.responses), "--tokens", str(args.tokens), "--device", args.device]
            if chunk is not None:
                cmd += ["--head-chunk", str(chunk)]
            label = name if chunk is None or len(chunks) == 1 else f"{name} (chunk {chunk})"
            row = _run_child(cmd, args.max_rss_gb) or {"name": name, "stopped_above_gb": args.max_rss_gb}
            row["name"], row["head_chunk"] = label, chunk
            rows.append(row)
            print(f"  {label}: {row}", flush=True)
    measured = [r for r in rows if "update_s" in r]
    key = "cuda_peak_gb" if measured and "cuda_peak_gb" in measured[0] else "peak_rss_gb"
    for r in measured:
        r["above_gb"] = r["peak_rss_gb"] - r["rss_before_gb"]
    plain = next((r for r in measured if r["name"] == "plain"), None)
    trl = next((r for r in measured if r["name"] == "TRL GRPOTrainer"), None)
    print(f"\nQwen2.5-0.5B shape, {args.layers} layers, {args.responses} x {args.tokens} response tokens, "
          f"{args.device}; peak = {key}")
    print("| configuration | peak GB | × plain | × TRL | above pre-update RSS GB | × plain | update s | × plain | × TRL |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "update_s" not in r:
            print(f"| {r['name']} | > {r['stopped_above_gb']:.1f} (stopped) | | | | | | | |")
            continue
        print(f"| {r['name']} | {r[key]:.2f} | {_ratio(r[key], plain, key)} | {_ratio(r[key], trl, key)} "
              f"| {r['above_gb']:.2f} | {_ratio(r['above_gb'], plain, 'above_gb')} | {r['update_s']:.1f} "
              f"| {_ratio(r['update_s'], plain, 'update_s')} | {_ratio(r['update_s'], trl, 'update_s')} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
