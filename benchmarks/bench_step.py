"""Seconds per GRPO training step: rlvr's Trainer against TRL's GRPOTrainer, same settings, one process.

Run (from the repository root, after `make setup` and `.venv/bin/pip install "trl==1.16.*"`):

    .venv/bin/python benchmarks/bench_step.py                 # 4 settings, 1 warm-up + 3 timed steps each
    .venv/bin/python benchmarks/bench_step.py --quick         # smoke: fp32 beta=0, 16 tokens, 1 + 1 steps
    .venv/bin/python benchmarks/bench_step.py --settings fp32-b0,bf16-b0 --steps 3 --completion-length 64

What is identical for the two trainers: the model files (rlvr's converted SmolLM2-135M-Instruct folder,
`rlvr.models.smollm2_path()`), the rows (reasoning-gym chain_sum, rlvr's default spec), the chat-formatted
prompts (checked token for token), the reward (rlvr's `accuracy`, a `MathAccuracy` with its own verifier
pool for TRL), B prompts x G generations, max_completion_length, temperature 1.0, top_p 1, no top_k,
beta, the parameter dtype (both models are *loaded* in fp32 or bf16; TRL also gets bf16=True), the loss
(token-mean: rlvr `token_mean`, TRL `dapo`), clip epsilon 0.2, AdamW(lr, betas 0.9/0.99, wd 0), grad
clipping at 1.0, constant lr, and one optimiser step per rollout (TRL: per_device_train_batch_size = B*G,
gradient_accumulation_steps = steps_per_generation = 1, so no old-log-prob pass in either).
TRL's own defaults that would make it slower for reasons unrelated to the algorithm are switched off:
gradient_checkpointing=False (TRL's default is True; --gradient-checkpointing turns it on in both), no
vLLM, no completion logging, report_to none.
What stays each library's own choice (and is part of what is measured): the rollout engine (TRL:
transformers `generate`; rlvr: its default `rollout_engine=rlvr` DecodeEngine, or --rlvr-engine hf for
`generate`), the optimiser implementation (TRL: fused AdamW; rlvr: torch.optim.AdamW defaults), TRL's chunked "fused LM head" log-probs
vs rlvr's shared-prefix scoring (each distinct prompt run once per micro-batch, logits only at
response positions), the data order and the RNG.

The steps alternate in one process: TRL step k (timed from on_step_begin to on_step_end by a
TrainerCallback), then rlvr step k (Trainer.training_step and its time/ metrics), so background load
hits both alike. The first --warmup steps of each are dropped; medians (and minima) over the rest.

Breakdown, attributed the same way for both (wrappers, not the libraries' own timers):
  generate  rlvr engine.generate / TRL _generate_single_turn (the `generate` call and its unpacking)
  reward    rlvr Rewarder (time/reward_s) / TRL _calculate_rewards
  logprobs  every forward outside generation: policy with grad and, with beta > 0, the reference
            (rlvr train.update.response_logprobs + response_logprobs_no_grad / TRL _get_per_token_logps_and_entropies)
  backward  time inside torch.Tensor.backward
  optim     time inside optimizer.step() (global torch optimizer step hooks)
  other     step - the above (decode, advantages, grad clipping, zero_grad, bookkeeping)
Generation time depends on how long the completions are (HF generate runs until the longest one
stops), so the mean and max completion length of each step are printed next to it.

After the timed steps of each setting (unless --no-check), the last TRL batch (first 4 rows) is scored
by both loss implementations on TRL's model: per-token log-probs, the loss value and the gradient are
compared (TRL `_compute_loss` with loss_type="dapo" vs rlvr score + clipped_surrogate + kl_k3 +
aggregate(token_mean)).

This is a script, not a test. Timings on a shared 2-core CPU are noisy; compare ratios, not seconds.
"""

from __future__ import annotations

import os

import rlvr  # noqa: F401  (before torch: rlvr's OpenMP set-up, src/rlvr/threads.py; TRL runs under it too)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import functools
import gc
import json
import logging
import platform
import statistics
import sys
import tempfile
import time
import warnings

import torch
from torch.optim.optimizer import (  # global hooks on every optimizer's step
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

SETTINGS = {  # name: (dtype, beta)
    "fp32-b0": ("float32", 0.0),
    "fp32-b0.04": ("float32", 0.04),
    "bf16-b0": ("bfloat16", 0.0),
    "bf16-b0.04": ("bfloat16", 0.04),
}
PARTS = ("generate", "reward", "logprobs", "backward", "optim")
CHECK_ROWS = 4


# --------------------------------------------------------------------------- timing buckets
class Buckets:
    """Seconds per part for the step being timed (``current`` is None between steps)."""

    def __init__(self):
        self.current: dict | None = None
        self._opt_start: float | None = None

    def add(self, key: str, seconds: float) -> None:
        if self.current is not None:
            self.current[key] = self.current.get(key, 0.0) + seconds


BUCKETS = Buckets()


def timed(fn, key):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            BUCKETS.add(key, time.perf_counter() - start)

    return wrapper


def install_global_timers() -> None:
    """backward (every Tensor.backward) and optimiser (every Optimizer.step), for both trainers."""
    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original_backward(self, *args, **kwargs)
        finally:
            BUCKETS.add("backward", time.perf_counter() - start)

    torch.Tensor.backward = backward

    def pre(optimizer, args, kwargs):
        BUCKETS._opt_start = time.perf_counter()

    def post(optimizer, args, kwargs):
        if BUCKETS._opt_start is not None:
            BUCKETS.add("optim", time.perf_counter() - BUCKETS._opt_start)
            BUCKETS._opt_start = None

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)

    from rlvr.train import update  # rlvr's update calls these two by module-level name

    update.response_logprobs = timed(update.response_logprobs, "logprobs")
    update.response_logprobs_no_grad = timed(update.response_logprobs_no_grad, "logprobs")


def record_lengths(rec: dict, lengths: list[int]) -> None:
    if lengths:
        rec["len_mean"] = statistics.fmean(lengths)
        rec["len_max"] = max(lengths)


# --------------------------------------------------------------------------- rlvr
def build_rlvr(args, dtype: str, beta: float, model_path: str, out_dir: str):
    """(rlvr's Trainer, its config: the Trainer keeps none once set up)."""
    from rlvr.config import build_config
    from rlvr.train.trainer import Trainer

    cfg = build_config({
        "model": model_path, "dtype": dtype, "device": "cpu", "beta": beta, "loss_type": "token_mean",
        "prompts_per_step": args.prompts, "num_generations": args.generations,
        "max_completion_length": args.completion_length, "temperature": 1.0, "top_p": 1.0,
        "learning_rate": args.lr, "adam_beta1": 0.9, "adam_beta2": 0.99, "weight_decay": 0.0,
        "max_grad_norm": 1.0, "lr_scheduler_type": "constant", "epsilon": 0.2,
        "max_steps": args.warmup + args.steps, "seed": args.seed, "output_dir": out_dir,
        "progress_bar": False, "log_completions": False, "verifier_workers": 1,
        "rollout_engine": args.rlvr_engine, "gradient_checkpointing": args.gradient_checkpointing,
    })
    trainer = Trainer(cfg)
    engine_generate = trainer.engine.generate

    def generate(*a, **k):
        start = time.perf_counter()
        completions = engine_generate(*a, **k)
        BUCKETS.add("generate", time.perf_counter() - start)
        if BUCKETS.current is not None:
            record_lengths(BUCKETS.current, [len(c.token_ids) for c in completions])
        return completions

    trainer.engine.generate = generate
    return trainer, cfg


def rlvr_step(trainer, step: int) -> dict:
    rec: dict = {}
    BUCKETS.current = rec
    try:
        metrics = trainer.training_step(step).metrics
    finally:
        BUCKETS.current = None
    rec["step"] = metrics["time/step_s"]
    rec["reward"] = metrics["time/reward_s"]  # rlvr's own timer (the Rewarder call)
    rec["rlvr_rollout_s"] = metrics["time/rollout_s"]
    rec["rlvr_update_s"] = metrics["time/update_s"]
    rec["loss"] = metrics["train/loss"]
    return rec


# --------------------------------------------------------------------------- TRL
def build_trl(args, dtype: str, beta: float, model_path: str, rows: list[dict], rlvr_cfg, out_dir: str,
              on_step_end):
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        PrinterCallback,
        TrainerCallback,
    )
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.data import prompt_messages
    from rlvr.rewards import VerifierPool
    from rlvr.rewards.math_rewards import MathAccuracy

    torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    data = Dataset.from_list([
        {"prompt": prompt_messages(r["prompt"], system_prompt=rlvr_cfg.data.system_prompt,
                                   instruction=rlvr_cfg.data.instruction),
         "answer": r["answer"]}
        for r in rows
    ])
    pool = VerifierPool(num_workers=1, timeout_s=rlvr_cfg.reward.verifier_timeout)
    reward = MathAccuracy(pool, answer_extraction=rlvr_cfg.reward.answer_extraction)
    batch = args.prompts * args.generations
    config = GRPOConfig(
        output_dir=out_dir, report_to="none", use_cpu=True, seed=args.seed,
        bf16=dtype == "bfloat16", fp16=False,
        max_steps=args.warmup + args.steps, logging_steps=1, save_strategy="no", disable_tqdm=True,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=args.generations, max_completion_length=args.completion_length,
        temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
        beta=beta, loss_type="dapo", epsilon=0.2, num_iterations=1, scale_rewards="group",
        learning_rate=args.lr, adam_beta1=0.9, adam_beta2=0.99, weight_decay=0.0, max_grad_norm=1.0,
        lr_scheduler_type="constant", warmup_steps=0,
        gradient_checkpointing=args.gradient_checkpointing, use_vllm=False, log_completions=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=data,
                          processing_class=tokenizer)
    trainer._bench_pool = pool

    single_turn = trainer._generate_single_turn

    def generate_single_turn(*a, **k):
        start = time.perf_counter()
        completion_ids, logprobs = single_turn(*a, **k)
        BUCKETS.add("generate", time.perf_counter() - start)
        if BUCKETS.current is not None:
            record_lengths(BUCKETS.current, [len(c) for c in completion_ids])
        return completion_ids, logprobs

    trainer._generate_single_turn = generate_single_turn
    trainer._calculate_rewards = timed(trainer._calculate_rewards, "reward")
    trainer._get_per_token_logps_and_entropies = timed(trainer._get_per_token_logps_and_entropies, "logprobs")
    generate_and_score = trainer._generate_and_score_completions

    def keep_last_batch(*a, **k):
        out = generate_and_score(*a, **k)
        trainer._bench_last_inputs = out
        return out

    trainer._generate_and_score_completions = keep_last_batch

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kwargs):
            self.rec = {}
            BUCKETS.current = self.rec
            self.start = time.perf_counter()

        def on_step_end(self, args_, state, control, **kwargs):
            self.rec["step"] = time.perf_counter() - self.start
            BUCKETS.current = None
            on_step_end(state.global_step, self.rec)

    trainer.add_callback(StepTimer())
    trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts would bury the benchmark's lines
    return trainer


# --------------------------------------------------------------------------- checks
def check_prompt_tokens(rlvr_trainer, cfg, trl_trainer, rows: list[dict], count: int = 8) -> str:
    from rlvr.data import prompt_messages

    same = 0
    for row in rows[:count]:
        messages = prompt_messages(row["prompt"], system_prompt=cfg.data.system_prompt,
                                   instruction=cfg.data.instruction)
        trl_ids = list(trl_trainer._tokenize_prompts([messages])[0][0])
        same += trl_ids == rlvr_trainer.prompt_builder.ids(row)
    return f"{same}/{count} prompts tokenised identically"


def _grads(model) -> list[torch.Tensor | None]:
    """Each trainable parameter's gradient (a float32 copy), None where it has none."""
    return [p.grad.detach().float().clone() if p.grad is not None else None
            for p in model.parameters() if p.requires_grad]


def _grad_agreement(first: list, second: list) -> tuple[float, float]:
    """(cosine, |a − b| / |a|) of two gradients, summed parameter by parameter in float64 on their device (no
    flattened copy: at 1.5B parameters that alone is 12 GB)."""
    dot = norm_a = norm_b = diff = 0.0
    for a, b in zip(first, second):
        if a is None and b is None:
            continue
        a = a.double() if a is not None else torch.zeros_like(b, dtype=torch.float64)
        b = b.double() if b is not None else torch.zeros_like(a, dtype=torch.float64)
        dot += float((a * b).sum())
        norm_a += float((a * a).sum())
        norm_b += float((b * b).sum())
        diff += float(((a - b) ** 2).sum())
    return dot / max((norm_a * norm_b) ** 0.5, 1e-300), (diff / max(norm_a, 1e-300)) ** 0.5


def check_loss_numerics(trl_trainer, beta: float, temperature: float = 1.0) -> dict:
    """Score TRL's last batch (first rows) with both loss implementations on TRL's model.

    Everything rlvr's side makes (the collated batch, the advantages) goes to the model's device, as a run
    does; under transformers' gradient checkpointing in train mode (TRL's default) the model drops the KV
    cache, and ``response_logprobs`` then scores each row unshared (``rlvr.train.batching``).
    """
    from rlvr.core.losses import LossSettings, aggregate, clip, kl_k3
    from rlvr.train.batching import collate, pad_rows, response_logprobs, response_logprobs_no_grad

    full = trl_trainer._bench_last_inputs
    sub = {key: full[key][:CHECK_ROWS] for key in
           ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")}
    if "ref_per_token_logps" in full:
        sub["ref_per_token_logps"] = full["ref_per_token_logps"][:CHECK_ROWS]
    sub["num_items_in_batch"] = sub["completion_mask"].sum()
    model = trl_trainer.model
    device = next(model.parameters()).device
    synthetic = bool((sub["advantages"] == 0).all())
    if synthetic:  # a batch of uniform groups has A = 0 everywhere: loss and gradient would both read 0
        fixed = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.7, -0.1, 0.9, -0.8], device=device)
        sub["advantages"] = fixed[: len(sub["advantages"])].to(sub["advantages"].dtype)
    pad_id = trl_trainer._tokenizer.pad_token_id
    prompts = [ids[m.bool()].tolist() for ids, m in zip(sub["prompt_ids"], sub["prompt_mask"])]
    responses = [ids[m.bool()].tolist() for ids, m in zip(sub["completion_ids"], sub["completion_mask"])]
    lengths = [len(r) for r in responses]

    model.zero_grad(set_to_none=True)
    trl_loss = trl_trainer._compute_loss(model, sub)
    trl_loss.backward()
    trl_grad = _grads(model)
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        input_ids = torch.cat([sub["prompt_ids"], sub["completion_ids"]], dim=1)
        attention = torch.cat([sub["prompt_mask"], sub["completion_mask"]], dim=1)
        trl_logps, _, _ = trl_trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention, sub["completion_ids"].size(1))

    batch = collate(prompts, responses, pad_token_id=pad_id)
    logps, _ = response_logprobs(model, batch, temperature=temperature)
    mask = batch.response_mask.to(device)
    advantages = sub["advantages"].float().to(device)
    per_token, _ = clip(logps, logps.detach(), advantages, mask, LossSettings(epsilon=0.2))
    ref_diff = None
    if beta > 0:
        ref = response_logprobs_no_grad(trl_trainer.ref_model, prompts, responses, pad_token_id=pad_id,
                            temperature=temperature, micro_batch_size=CHECK_ROWS)
        ref = pad_rows(ref, batch.response_width).to(device)
        per_token = per_token + beta * kl_k3(logps, ref, mask)
        trl_ref = sub["ref_per_token_logps"]
        ref_diff = max(float((ref[i, :n] - trl_ref[i, :n].float()).abs().max()) for i, n in enumerate(lengths))
    rlvr_loss = aggregate(per_token, mask, "token_mean")
    rlvr_loss.backward()
    rlvr_grad = _grads(model)
    model.zero_grad(set_to_none=True)

    logp_diff = max(float((logps[i, :n].detach() - trl_logps[i, :n].float()).abs().max())
                    for i, n in enumerate(lengths))
    cosine, rel = _grad_agreement(trl_grad, rlvr_grad)
    return {"rows": CHECK_ROWS, "tokens": int(sum(lengths)), "trl_loss": float(trl_loss.detach()),
            "rlvr_loss": float(rlvr_loss.detach()), "synthetic_advantages": synthetic, "max_abs_logp_diff": logp_diff, "max_abs_ref_logp_diff": ref_diff,
            "grad_cosine": cosine, "grad_rel_diff": rel}


# --------------------------------------------------------------------------- one setting
def run_setting(args, name: str, model_path: str) -> dict:
    from rlvr.data import load_rows

    dtype, beta = SETTINGS[name]
    total = args.warmup + args.steps
    tmp = tempfile.mkdtemp(prefix=f"bench_step_{name}_")
    rlvr_trainer, rlvr_cfg = build_rlvr(args, dtype, beta, model_path, os.path.join(tmp, "rlvr"))
    rows = load_rows(rlvr_cfg.data.data)
    records = {"rlvr": [], "trl": []}

    def after_trl_step(step: int, rec: dict) -> None:
        metrics = trl_trainer._metrics["train"]
        rec["reward_mean"] = metrics["reward"][-1] if metrics.get("reward") else None
        records["trl"].append(rec)
        records["rlvr"].append(rlvr_step(rlvr_trainer, step))
        r = records["rlvr"][-1]
        tag = "warm-up" if step <= args.warmup else "timed"
        print(f"  [{name}] step {step}/{total} ({tag}): TRL {rec['step']:.1f} s (len {rec.get('len_mean', 0):.0f}"
              f"/{rec.get('len_max', 0)}) | rlvr {r['step']:.1f} s (len {r.get('len_mean', 0):.0f}"
              f"/{r.get('len_max', 0)})", flush=True)

    trl_trainer = build_trl(args, dtype, beta, model_path, rows, rlvr_cfg, os.path.join(tmp, "trl"),
                            after_trl_step)
    prompt_check = check_prompt_tokens(rlvr_trainer, rlvr_cfg, trl_trainer, rows)
    trl_opt = str(trl_trainer.args.optim)
    rlvr_opt = f"torch.optim.AdamW(fused={rlvr_trainer.optimizer.defaults.get('fused')})"
    print(f"  [{name}] {prompt_check}; TRL optim={trl_opt}; rlvr optim={rlvr_opt}; rlvr engine="
          f"{type(rlvr_trainer.engine).__name__}", flush=True)
    start = time.perf_counter()
    trl_trainer.train()
    wall = time.perf_counter() - start
    check = None
    if not args.no_check:
        try:
            check = check_loss_numerics(trl_trainer, beta)
        except Exception as error:  # noqa: BLE001  (report it; keep the timings)
            check = {"error": f"{type(error).__name__}: {error}"}
    rlvr_trainer.rewarder.close()
    trl_trainer._bench_pool.close()
    rlvr_trainer = trl_trainer = None  # free both models before the next setting
    gc.collect()
    return {"setting": name, "dtype": dtype, "beta": beta, "records": records, "prompt_check": prompt_check,
            "trl_optim": trl_opt, "loss_check": check, "wall_s": wall}


# --------------------------------------------------------------------------- report
def summarise(records: list[dict], warmup: int) -> dict:
    timed_recs = records[warmup:] or records
    out = {"n": len(timed_recs)}
    for key in ("step", *PARTS):
        values = [r.get(key, 0.0) for r in timed_recs]
        out[key] = statistics.median(values)
        if key == "step":
            out["step_min"] = min(values)
    out["other"] = statistics.median([r["step"] - sum(r.get(k, 0.0) for k in PARTS) for r in timed_recs])
    out["len_mean"] = statistics.fmean(r.get("len_mean", 0.0) for r in timed_recs)
    out["len_max"] = max(r.get("len_max", 0) for r in timed_recs)
    return out


def print_report(results: list[dict], args) -> None:
    cols = ("step", "step_min", *PARTS, "other")
    print()
    print(f"Medians over {args.steps} timed step(s) after {args.warmup} warm-up step(s); "
          f"B={args.prompts} x G={args.generations}, {args.completion_length} completion tokens. Seconds.")
    header = f"{'setting':<11} {'impl':<5} " + " ".join(f"{c:>9}" for c in cols) + f" {'len mean/max':>13}"
    print(header)
    print("-" * len(header))
    for res in results:
        s = {impl: summarise(res["records"][impl], args.warmup) for impl in ("rlvr", "trl")}
        res["summary"] = s
        for impl in ("rlvr", "trl"):
            row = s[impl]
            print(f"{res['setting']:<11} {impl:<5} " + " ".join(f"{row[c]:>9.2f}" for c in cols)
                  + f" {row['len_mean']:>7.1f}/{row['len_max']:<5}")
        ratio = {c: (s["rlvr"][c] / s["trl"][c] if s["trl"][c] > 1e-9 else float("nan")) for c in cols}
        res["ratio"] = ratio
        print(f"{'':<11} {'r/T':<5} " + " ".join(f"{ratio[c]:>9.2f}" for c in cols))
    print("\nratio r/T = rlvr / TRL (below 1: rlvr faster).")
    for res in results:
        chk = res["loss_check"]
        if chk is None:
            print(f"{res['setting']}: loss numerics not checked (--no-check)")
        elif "error" in chk:
            print(f"{res['setting']}: loss check failed to run: {chk['error']}")
        else:
            ref = (f", max|d ref logp| {chk['max_abs_ref_logp_diff']:.2e}"
                   if chk["max_abs_ref_logp_diff"] is not None else "")
            adv = " (its advantages were all 0: replaced by fixed values)" if chk["synthetic_advantages"] else ""
            print(f"{res['setting']}: loss check on {chk['rows']} rows / {chk['tokens']} tokens of TRL's last batch{adv}, "
                  f"TRL's model: loss TRL {chk['trl_loss']:.6g} vs rlvr {chk['rlvr_loss']:.6g}; max|d logp| "
                  f"{chk['max_abs_logp_diff']:.2e}{ref}; grad cosine {chk['grad_cosine']:.6f}, "
                  f"rel diff {chk['grad_rel_diff']:.2e}")
        print(f"{res['setting']}: {res['prompt_check']}; TRL optim {res['trl_optim']}; wall {res['wall_s']:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"comma list of {', '.join(SETTINGS)} (default: all)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per trainer and setting (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    parser.add_argument("--completion-length", type=int, default=128, help="max completion tokens (default 128)")
    parser.add_argument("--prompts", type=int, default=4, help="B, prompts per step (default 4)")
    parser.add_argument("--generations", type=int, default=8, help="G, completions per prompt (default 8)")
    parser.add_argument("--lr", type=float, default=1e-6, help="learning rate for both (default 1e-6)")
    parser.add_argument("--rlvr-engine", default="rlvr", help="rlvr's rollout_engine: rlvr (default) or hf")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="gradient_checkpointing on in both trainers (default off in both)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--no-check", action="store_true", help="skip the loss-numerics comparison")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: fp32-b0 only, 16 tokens, 1 warm-up + 1 timed step")
    parser.add_argument("--json", default=None, help="also write every per-step record to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.settings, args.completion_length, args.warmup, args.steps = "fp32-b0", 16, 1, 1
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in names if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {unknown}; choose from {list(SETTINGS)}")
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    try:
        import trl
    except ImportError:
        print("bench_step needs TRL: .venv/bin/pip install 'trl==1.16.*' (keeps torch 2.13.0; check `pip list`)",
              file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    from rlvr.models import smollm2_path

    model_path = str(smollm2_path())
    print(f"bench_step: torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
          f"{transformers.__version__}, trl {trl.__version__}, python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; model {model_path}")
    install_global_timers()
    results = []
    for name in names:
        load = os.getloadavg()
        print(f"setting {name}: dtype={SETTINGS[name][0]} beta={SETTINGS[name][1]}; load average before "
              f"{load[0]:.1f} (1 min)", flush=True)
        results.append(run_setting(args, name, model_path))
        results[-1]["loadavg_before"], results[-1]["loadavg_after"] = load, os.getloadavg()
        print(f"setting {name} done; load average after {results[-1]['loadavg_after'][0]:.1f}", flush=True)
    print_report(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
