"""The first GPU minutes: one command that measures what a researcher asks first, on models of real shapes.

Run on the lent GPU machine (docs/scaling.md "The GPU check" gives the whole procedure: the kit that
travels, the install line, the expected time of each part):

    PYTHONPATH=$PWD/src:$PWD/kit/site python3 benchmarks/gpu_check.py --out gpu_out

and here, to check the script itself on tiny shapes (a test runs this):

    .venv/bin/python benchmarks/gpu_check.py --device cpu --out /tmp/gpu_check_cpu

Nothing is downloaded. The models are randomly initialised from the Qwen2.5-0.5B / 1.5B / 7B configs
written below (speed and memory need real shapes, not trained weights); the tokenizer is the small one
the kit carries (``--tokenizer``, default ``kit/tokenizer``; SmolLM2's, 49 152 ids, all inside Qwen's
vocabulary). Every response is exactly ``--completion-length`` tokens: EOS is ignored (rlvr: the engine's
stop ids are set to an id the model cannot sample; TRL: ``generation_kwargs={"min_new_tokens": T}``), so
the work is the same in every run. The reward is a hash of the completion's token ids in [0, 1): it varies
within every group, so every step updates.

Parts, in order, each in a process of its own with its own time budget (``--budget-scale`` multiplies them
all). Before it starts the script prints its plan: each part's estimated seconds (its rollout positions and
update tokens at the rates in ``RATES``, measured on an H200, plus a process's first rollout and update and
its start) and its budget. When the budgets total more than one device command (600 s) it stops and names
the commands to run instead (the six parts at T = 512 take two: ``--parts grpo,trl,dagrpo`` and ``--parts
tagrpo,memory7b,options``). A part that passes its budget is killed with its whole process group (a cut no code
inside it can catch), its numbers so far kept, status ``cut``, and the next part starts in a fresh process
(its memory starts empty: the start is recorded). Just before the cut the part dumps every thread's stack
(``faulthandler`` on SIGUSR1) into the JSON (``last_stacks``), so a part that hangs or crawls says where.
The part writes its numbers into the JSON (``OUT/gpu_check.json``) after every rollout and every step, so
a cut part, or a run killed from outside, keeps what it measured:

  grpo      rlvr GRPO at the 1.5B shape: fp32 master weights with bf16 compute (``bf16=true``),
            gradient checkpointing, chunked LM head, B = 8 prompts x G = 8, T = 512; 1 warm-up + 1 timed
            step: seconds per step, rollout tokens/s, peak memory
  trl       TRL's GRPOTrainer, same model, data, reward, batch and options (its defaults otherwise), in
            one process: seconds per step (synchronised), the rlvr/TRL ratio, and bench_step.py's loss-equality
            check on TRL's first batch, outside the timed steps (log-probs, loss and gradient of both
            implementations; the peak is reset after it, so TRL's peak is its training's)
  dagrpo    one DaGRPO step at the same shape (pair masking, ``steps`` scorer, an anchor from the row's
            solution in every group: ``anchors=always``, since the hashed reward leaves no group failed)
  tagrpo    one TA-GRPO step at the same shape (N = 2 rule rephrasings: (N + 1) x G responses per question,
            the whole pool of 192 rolled out in one go: ``max_rollout_batch_size`` 192)
  memory7b  one update at the 7B shape (4 responses of 1024 tokens, 256-token prompts, ``dtype=bfloat16``,
            no memory option, beta = 0, fused AdamW): peak memory against docs/scaling.md's prediction for
            that row (benchmarks/memory_fit.py's arithmetic on its counted activations)
  options   each memory option alone, one update at the 1.5B shape (16 responses of 1024 tokens in groups
            of 4 sharing a 256-token prompt): peak memory and time against plain ``dtype=bfloat16``

``--device cpu`` is the dry run at the GPU's own settings: every shape tiny (2 layers, hidden 64), B = 2 x G = 4,
T = 16, no budgets, but the same options (bf16 autocast with fp32 master weights, gradient checkpointing in
both trainers, the chunked head at a chunk of 8 tokens, micro-batches of a quarter of the batch as on the GPU)
and the same process per part, under ``rlvr.parallel.device_check.DeviceDiscipline``: the models live on an
emulated accelerator (``cpu:0``) and an operation meeting one of their tensors and a host tensor raises, as
CUDA would. It checks the code path, not the numbers. This is a script, not a test: it asserts nothing
about speed. Exit code 1 if a part failed (a cut part is not a failure), 2 without a CUDA device
(unless --device cpu).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import contextlib
import faulthandler
import gc
import json
import math
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_step (the loss check), memory_fit (the prediction)

QWEN = {  # Qwen2.5's published configs (the fields that set the shape)
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=49152, tie_word_embeddings=True)
COMMON = dict(max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6, hidden_act="silu")
PARTS = ("grpo", "trl", "dagrpo", "tagrpo", "memory7b", "options")
# Rates on one H200, measured by this script on 2026-12-04 (grpo part, T = 512, 64 sequences; rounded): seconds
# per decoded position of a 1.5B batch once its shapes were seen (0.027), the extra seconds per position of a
# process's first rollout (0.126 - 0.027: a set-up per new attention length, likeliest cuDNN's; the engine's
# length buckets should shrink it, not measured yet), update tokens per second of 1.5B (forward, checkpointed
# recompute, backward: 14 600), the first update's extra seconds (12.3 - 2.5), TRL's seconds per decoded
# position (transformers' generate; its second step, 34.8 s, less the update), seconds to build a random
# model on the GPU (stated), a part's start (imports, CUDA context, the trainer's set-up: 23.7 s less the build).
RATES = {"decode_s_per_position": 0.027, "first_rollout_s_per_position": 0.1, "update_tokens_per_s": 15000.0,
         "first_update_s": 10.0, "trl_decode_s_per_position": 0.06, "build_s": {"1.5B": 5.0, "7B": 10.0},
         "process_start_s": 20.0}
MARGIN = 1.3  # budget = estimate x margin
COMMAND_LIMIT_S = 600  # the device tool's limit for one command
# the run's memory and precision stack (docs/scaling.md): fp32 master weights, bf16 compute, checkpointed
# layers, the chunked LM head
LEAN = {"dtype": "float32", "bf16": True, "gradient_checkpointing": True, "lm_head_chunk_tokens": 1024}
TINY_LEAN = {**LEAN, "lm_head_chunk_tokens": 8}  # the dry run: the same stack, a chunk the size of its shapes
OPTIONS = {  # each memory option alone, against plain dtype=bfloat16
    "plain bf16": {"dtype": "bfloat16"},
    "+gradient_checkpointing": {"dtype": "bfloat16", "gradient_checkpointing": True},
    "+lm_head_chunk_tokens=1024": {"dtype": "bfloat16", "lm_head_chunk_tokens": 1024},
    "+lora_r=16": {"dtype": "bfloat16", "lora_r": 16},
    "bf16=true (fp32 master)": {"dtype": "float32", "bf16": True},
}
# docs/scaling.md's "What fits" table, as benchmarks/memory_fit.py --json wrote it
PREDICTIONS = HERE / "results" / "memory_fit_2026-12-01.json"


def estimates(args) -> dict[str, dict]:
    """Each part's estimated seconds from its work at ``RATES``: rollout positions, update tokens, models built."""
    r, T, n = RATES, args.completion_length, args.prompts * args.generations
    prompt = 64  # the rows' chat prompts, about

    def part(rollouts: int, update_tokens: int, builds: list[str], extra: float = 0.0, pool: int = 1,
             decode: str = "decode_s_per_position") -> dict:
        first = T * r["first_rollout_s_per_position"] if rollouts else 0.0  # a process's first rollout
        seconds = (r["process_start_s"] + first + rollouts * T * r[decode] + update_tokens /
                   r["update_tokens_per_s"] + r["first_update_s"] + sum(r["build_s"][b] for b in builds) + extra)
        return {"rollout_tokens": rollouts * pool * n * T, "update_tokens": update_tokens, "estimate_s": seconds,
                "budget_s": seconds * MARGIN * args.budget_scale}

    step_tokens = n * (T + prompt)
    options_tokens = 16 * (args.update_length + 256)
    return {
        "grpo": part(args.steps, args.steps * step_tokens, ["1.5B"]),
        "trl": part(args.steps, args.steps * step_tokens, ["1.5B"], extra=step_tokens / 8 / r["update_tokens_per_s"],
                    decode="trl_decode_s_per_position"),
        "dagrpo": part(1, step_tokens + args.prompts * (T + prompt), ["1.5B"]),  # + one anchor a group
        "tagrpo": part(1, 3 * step_tokens * 4 // 3, ["1.5B"], pool=3),  # 3 variants at once; ratios on q_0
        "memory7b": part(0, 4 * (args.update_length + 256) * 5, ["7B"]),  # 7B: ~5x the 1.5B's work a token
        "options": part(0, len(OPTIONS) * options_tokens, ["1.5B"] * len(OPTIONS)),
    }


def print_plan(args, plan: dict) -> None:
    rates = ", ".join(f"{k} {v}" for k, v in RATES.items())
    print(f"plan (rates, docs/scaling.md: {rates}; budget = estimate x {MARGIN} x {args.budget_scale}):")
    for part in args.parts:
        p = plan[part]
        print(f"  {part:<9} rollout {p['rollout_tokens']:>7} tokens, update {p['update_tokens']:>7} tokens: "
              f"~{p['estimate_s']:.0f} s, budget {p['budget_s']:.0f} s")
    total = sum(plan[p]["budget_s"] for p in args.parts)
    print(f"  total budget {total:.0f} s against the {COMMAND_LIMIT_S} s command limit "
          f"({COMMAND_LIMIT_S - total:.0f} s to spare)", flush=True)


def split_parts(args, plan: dict) -> list[list[str]]:
    """The parts in order, cut into runs whose budgets each fit one command (a part alone may not)."""
    runs, total = [[]], 0.0
    for part in args.parts:
        if runs[-1] and total + plan[part]["budget_s"] > COMMAND_LIMIT_S:
            runs.append([])
            total = 0.0
        runs[-1].append(part)
        total += plan[part]["budget_s"]
    return runs


# --------------------------------------------------------------------------- models, data, reward
def model_config(shape: str, args):
    from transformers import Qwen2Config

    return Qwen2Config(**(TINY if args.tiny else QWEN[shape]), **COMMON)


def random_model(shape: str, args, dtype: torch.dtype):
    """A Qwen2 of ``shape`` with random weights, built on the device (initialising 7B on a CPU takes minutes)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(model_config(shape, args), dtype=dtype).eval()
    if args.tiny:  # the dry run: the model lives on the emulated accelerator (rlvr.parallel.device_check)
        from rlvr.parallel.device_check import mark_on_device

        mark_on_device(model)
    return model


def register_models(args) -> None:
    """rlvr's model aliases ``gpu-check-<shape>``: the random model and the kit's tokenizer (rlvr.models.ALIASES)."""
    from transformers import AutoTokenizer

    from rlvr.models import ALIASES

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    for shape in QWEN:
        def load(*, dtype, seed, attn_implementation=None, shape=shape):
            dtype = torch.float32 if dtype == "auto" else dtype
            return random_model(shape, args, dtype), tokenizer

        ALIASES[f"gpu-check-{shape}"] = load
    args.tokenizer_object = tokenizer


def rows(count: int) -> list[dict]:
    """Two-number sums with worked solutions (DaGRPO's anchors come from them)."""
    out = []
    for i in range(count):
        a, b = 17 + 7 * i % 89, 5 + 13 * i % 71
        out.append({"id": f"sum-{i}", "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                    "answer": str(a + b), "solution": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"})
    return out


def completion_text(completion) -> str:
    if isinstance(completion, list):  # TRL's conversational completions
        return "".join(message.get("content", "") for message in completion)
    return str(completion)


def hashed_reward(completions, completion_ids=None, **kwargs) -> list[float]:
    """A number in [0, 1) from the completion's token ids (both trainers pass them; else its text): varies within
    every group of random-model responses (the text would not: the dry run's tokenizer decodes most of a random
    model's ids to nothing)."""
    keys = completion_ids if completion_ids is not None else [completion_text(c) for c in completions]
    return [zlib.crc32(repr(list(k) if not isinstance(k, str) else k).encode()) % 1000 / 1000 for k in keys]


# --------------------------------------------------------------------------- rlvr's trainer
def rlvr_config(args, part: str, **extra):
    from rlvr.config import build_config

    return build_config({
        "model": "gpu-check-1.5B", "data": args.rows, "device": args.device, "seed": args.seed,
        "reward_funcs": [hashed_reward], "prompts_per_step": args.prompts, "num_generations": args.generations,
        "max_completion_length": args.completion_length, "per_device_train_batch_size": args.micro_batch,
        "temperature": 1.0, "top_p": 1.0, "learning_rate": 1e-6, "beta": 0.0, "loss_type": "dapo",
        "lr_scheduler_type": "constant", "max_grad_norm": 1.0, "output_dir": str(args.work / part),
        "save_steps": 0, "save_strategy": "no", "progress_bar": False, "log_completions": False,
        "report_to": "none", "verifier_workers": 1, "max_steps": 100,
        **(TINY_LEAN if args.tiny else LEAN), **extra,
    })


def never_stop(trainer) -> None:
    """Fixed-length responses: the engine stops at an id the model cannot sample (one past its vocabulary)."""
    trainer.engine.eos_token_ids = [trainer.policy.config.vocab_size]


def reset_peak(args) -> None:
    gc.collect()
    if args.cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(args) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if args.cuda else None


def synchronize(args) -> None:
    if args.cuda:
        torch.cuda.synchronize()


def memory_now(args) -> dict:
    """What the process holds on the GPU now, and what the GPU has free (another tenant would show here)."""
    if not args.cuda:
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"allocated_gib": torch.cuda.memory_allocated() / 2**30, "free_gib": free / 2**30,
            "total_gib": total / 2**30}


STEP_KEYS = ("time/step_s", "time/rollout_s", "time/reward_s", "time/update_s", "perf/tokens_per_s", "train/loss",
             "train/grad_norm", "completions/mean_length", "reward", "dagrpo/anchor_rate", "dagrpo/anchor_unavailable",
             "dagrpo/masked_pair_frac", "tagrpo/variants_per_pool")


def rlvr_steps(args, part: str, steps: int, record: dict, save, **extra) -> None:
    """``steps`` training steps of rlvr; each rollout's and each step's numbers into ``record`` as they come."""
    from rlvr.train.trainer import Trainer

    reset_peak(args)
    cfg = rlvr_config(args, part, **extra)  # (the Trainer keeps no config once set up)
    trainer = Trainer(cfg)
    never_stop(trainer)
    record["steps"], record["rollouts"] = [], []
    record["after_set_up"] = memory_now(args)
    record["settings"] = {"dtype": cfg.model.dtype, "bf16": cfg.model.bf16,
                          "gradient_checkpointing": cfg.model.gradient_checkpointing,
                          "lm_head_chunk_tokens": cfg.optim.lm_head_chunk_tokens,
                          "per_device_train_batch_size": cfg.optim.per_device_train_batch_size,
                          "device": str(trainer.device)}
    save()
    round_ = trainer.generation.round

    def timed_round(step, **kwargs):  # a step cut in its update still keeps its rollout's numbers
        synchronize(args)
        start = time.perf_counter()
        profile = args.profile and not record["rollouts"]
        with (torch.profiler.profile() if profile else contextlib.nullcontext()) as profiler:
            groups = round_(step, **kwargs)
            synchronize(args)
        seconds = time.perf_counter() - start
        if profile:
            record["rollout_profile"] = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        tokens = sum(len(c.token_ids) for g in groups for c in g.completions)
        record["rollouts"].append({"step": step, "seconds": seconds, "responses": sum(len(g.completions) for g in groups),
                                   "tokens": tokens, "tokens_per_s": tokens / seconds,
                                   "s_per_position": seconds / args.completion_length, "peak_gib": peak_gib(args)})
        save()
        return groups

    trainer.generation.round = timed_round
    try:
        for step in range(1, steps + 1):
            synchronize(args)
            start = time.perf_counter()
            metrics = trainer.training_step(step).metrics
            synchronize(args)
            record["steps"].append({key: metrics.get(key) for key in STEP_KEYS} |
                                   {"wall_s": time.perf_counter() - start, "peak_gib": peak_gib(args)})
            save()
    finally:
        trainer.close()
        del trainer
        reset_peak(args)


def summarise_steps(record: dict) -> None:
    """Median over the timed steps (the first is a warm-up when there are two or more)."""
    steps = record.get("steps") or []
    timed = steps[1:] if len(steps) > 1 else steps
    for key, name in (("time/step_s", "step_s"), ("time/rollout_s", "rollout_s"), ("time/update_s", "update_s"),
                      ("perf/tokens_per_s", "tokens_per_s")):
        values = [s[key] for s in timed if s.get(key) is not None]
        record[name] = statistics.median(values) if values else None
    record["peak_gib"] = max((s["peak_gib"] for s in steps if s.get("peak_gib") is not None), default=None)
    record["timed_steps"] = len(timed)


def part_grpo(args, record, save):
    import memory_fit

    # docs/scaling.md's arithmetic for this run: 1.5B, bf16=true, beta 0, micro-batches of 16, ckpt+chunk,
    # this T, ~64-token prompts; the peak is the larger of the update's and the rollout's (64 sequences)
    setting = memory_fit.Setting("1.5B", False, "mixed", 0.0, args.micro_batch, True, True,
                                 T=args.completion_length, prompt=64)
    acts = json.loads(PREDICTIONS.read_text())["activations_bytes_per_token_per_layer"]
    record["predicted_gib"] = max(memory_fit.update_gib(setting, acts, "one"), memory_fit.rollout_gib(setting, "one"))
    record["predicted_row"] = setting.label() + " (prompts of 64 tokens)"
    rlvr_steps(args, "grpo", args.steps, record, save)


def part_dagrpo(args, record, save):
    # the hashed reward is > 0 almost always, so no group "fails": anchors=always puts one in every group
    rlvr_steps(args, "dagrpo", 1, record, save, algo="dagrpo", anchors="always")


def part_tagrpo(args, record, save):
    # the pool of (N + 1) x G responses a question, B questions: one rollout, not three after one another
    pool = args.prompts * 3 * args.generations
    rlvr_steps(args, "tagrpo", 1, record, save, algo="tagrpo", num_rephrasings=2, max_rollout_batch_size=pool)


# --------------------------------------------------------------------------- TRL
def part_trl(args, record, save):
    """TRL's GRPOTrainer on the same model shape, rows, prompts, reward and batch; then the loss check."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.data import prompt_messages

    cfg = rlvr_config(args, "trl_rows")
    reset_peak(args)
    model = random_model("1.5B", args, torch.float32)
    data = Dataset.from_list([{"prompt": prompt_messages(r["question"], system_prompt=cfg.data.system_prompt,
                                                         instruction=cfg.data.instruction)} for r in args.rows])
    config = GRPOConfig(
        output_dir=str(args.work / "trl"), report_to="none", use_cpu=not args.cuda, seed=args.seed,
        bf16=True, gradient_checkpointing=True, max_steps=args.steps, logging_steps=1, save_strategy="no",
        disable_tqdm=True, per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.prompts * args.generations // args.micro_batch,
        num_generations=args.generations, max_completion_length=args.completion_length,
        generation_kwargs={"min_new_tokens": args.completion_length}, temperature=1.0, top_p=1.0,
        beta=0.0, loss_type="dapo", learning_rate=1e-6, max_grad_norm=1.0, lr_scheduler_type="constant",
        use_vllm=False, log_completions=False, dataloader_num_workers=0, shuffle_dataset=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[hashed_reward], args=config, train_dataset=data,
                          processing_class=args.tokenizer_object)
    generate_and_score = trainer._generate_and_score_completions

    def keep_last_batch(*a, **k):  # bench_step's loss check reads the last batch
        trainer._bench_last_inputs = generate_and_score(*a, **k)
        return trainer._bench_last_inputs

    trainer._generate_and_score_completions = keep_last_batch
    record["steps"] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            synchronize(args)
            self.start = time.perf_counter()

        def on_step_end(self, _args, state, control, **kwargs):
            synchronize(args)
            metrics = trainer._metrics["train"]
            record["steps"].append({"time/step_s": time.perf_counter() - self.start, "peak_gib": peak_gib(args),
                                    "completions/mean_length": (metrics.get("completions/mean_length") or [None])[-1],
                                    "reward": (metrics.get("reward") or [None])[-1]})
            save()
            if "loss_check" not in record:  # on the first step's batch, outside the timed step: a cut keeps it
                record["loss_check"] = loss_check(args, trainer)
                reset_peak(args)  # TRL's peak is its training's, not the check's gradient copies
                save()

    trainer.add_callback(StepTimer())
    trainer.remove_callback(PrinterCallback)
    try:
        trainer.train()
    finally:
        trainer = model = None  # free both before the next part (the callbacks hold the trainer: a cycle)
        reset_peak(args)


def loss_check(args, trainer) -> dict:
    """bench_step's loss check on TRL's batch; in the dry run under the device discipline, TRL's model and batch
    on the emulated accelerator (where they are on the GPU), so whatever rlvr's side leaves on the host fails."""
    import bench_step

    if not args.tiny:
        return bench_step.check_loss_numerics(trainer, beta=0.0)
    from rlvr.parallel.device_check import DeviceDiscipline, mark_on_device

    mark_on_device(trainer.model, *[v for v in trainer._bench_last_inputs.values() if isinstance(v, torch.Tensor)])
    with DeviceDiscipline():
        return bench_step.check_loss_numerics(trainer, beta=0.0)


# --------------------------------------------------------------------------- one update, memory
def one_update(args, shape: str, options: dict, groups: list[tuple[list[int], int]]) -> dict:
    """Peak memory and seconds of one rlvr update (forward, backward, AdamW step) on a random ``shape`` model.

    ``groups``: (prompt ids, responses) — each response ``args.update_length`` random tokens (1 024; 16 tiny).
    """
    from rlvr.config import build_config
    from rlvr.models.activation_checkpointing import enable_activation_checkpointing
    from rlvr.models.loading import apply_lora
    from rlvr.rollout import Completion
    from rlvr.train.experience import Experience
    from rlvr.train.plan import compile_plan
    from rlvr.train.rollout_phase import Group
    from rlvr.train.setup import build_optimizer
    from rlvr.train.update import PolicyUpdate

    reset_peak(args)
    dtype = torch.bfloat16 if options.get("dtype") == "bfloat16" else torch.float32
    model = random_model(shape, args, dtype)
    if options.get("lora_r"):
        model = apply_lora(model, r=options["lora_r"], alpha=32, dropout=0.0, target_modules="all-linear")
        if args.tiny:  # PEFT puts the adapters beside their base weights (on the GPU too); the emulation
            from rlvr.parallel.device_check import mark_on_device  # does not follow PEFT's placement

            mark_on_device(model)
    if options.get("gradient_checkpointing"):
        enable_activation_checkpointing(model)
    n = sum(count for _, count in groups)
    generations = max(2, groups[0][1])  # the config's batch shape only sizes the micro-batch: n responses
    cfg = build_config({"model": "tiny-random", "prompts_per_step": n // generations, "num_generations": generations,
                        "max_completion_length": args.update_length, "learning_rate": 1e-6,
                        "per_device_train_batch_size": n, **options})
    gen = torch.Generator().manual_seed(1)
    vocab = args.tokenizer_object.vocab_size
    batch = [Group(group_id=g + 1, row={"id": str(g)}, prompt_ids=prompt,
                   completions=[Completion(torch.randint(0, vocab, (args.update_length,), generator=gen).tolist(),
                                           [0.0] * args.update_length, True) for _ in range(count)],
                   texts=[""] * count, rewards=[float(i % 2) for i in range(count)])
             for g, (prompt, count) in enumerate(groups)]
    experience = Experience.from_groups(batch)
    advantages = torch.linspace(-1, 1, len(experience))
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad], cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    update = PolicyUpdate(compile_plan(cfg).update, model, optimizer, scheduler,
                          pad_token_id=args.tokenizer_object.pad_token_id or 0)
    weights_gib = peak_gib(args)
    if args.cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = update(experience, advantages)
    if args.cuda:
        torch.cuda.synchronize()
    out = {"update_s": time.perf_counter() - start, "peak_gib": peak_gib(args), "weights_gib": weights_gib,
           "loss": result.loss, "responses": n, "tokens": n * args.update_length}
    del update, optimizer, scheduler, model
    reset_peak(args)
    return out


def prompt_ids(args, length: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, args.tokenizer_object.vocab_size, (length,), generator=gen).tolist()


def part_memory7b(args, record, save):
    import memory_fit

    prompt = 16 if args.tiny else 256
    record.update(one_update(args, "7B", {"dtype": "bfloat16"}, [(prompt_ids(args, prompt, i), 1) for i in range(4)]))
    cells = json.loads(PREDICTIONS.read_text())["cells"]
    label = memory_fit.Setting("7B", False, "bf16", 0, 4, False, False).label()
    (cell,) = [c for c in cells if c["setting"] == label and c["parallelism"] == "one"]
    record["predicted_row"], record["predicted_gib"] = label, cell["update_gib"]
    save()


def part_options(args, record, save):
    prompt = 16 if args.tiny else 256
    groups = [(prompt_ids(args, prompt, 100 + g), 4) for g in range(4)]
    record["options"] = {}
    record["warm_up"] = one_update(args, "1.5B", OPTIONS["plain bf16"], groups[:1])  # cuBLAS, kernels: not in a row
    for name, options in OPTIONS.items():
        record["options"][name] = one_update(args, "1.5B", options, groups)
        save()
    plain = record["options"]["plain bf16"]
    for row in record["options"].values():
        if plain.get("peak_gib"):
            row["peak_vs_plain"] = row["peak_gib"] / plain["peak_gib"]
        row["time_vs_plain"] = row["update_s"] / plain["update_s"]


RUN = {"grpo": part_grpo, "trl": part_trl, "dagrpo": part_dagrpo, "tagrpo": part_tagrpo,
       "memory7b": part_memory7b, "options": part_options}


# --------------------------------------------------------------------------- report
def environment(args) -> dict:
    import transformers

    import rlvr

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "transformers": transformers.__version__, "rlvr": rlvr.__version__, "device": args.device,
           "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    with contextlib.suppress(ImportError):
        import trl

        env["trl"] = trl.__version__
    if args.cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=props.name, gpu_memory_gib=props.total_memory / 2**30)
    return env


def fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def table(results: dict) -> str:
    lines = [f"{'part':<30} {'status':<8} {'step s':>8} {'rollout s':>9} {'update s':>9} {'tok/s':>8} {'peak GiB':>9}"]
    for part, r in results.items():
        if part == "options":
            lines.append(f"{'options':<30} {r['status']:<8}")
            for name, row in (r.get("options") or {}).items():
                lines.append(f"  {name:<28} {'':<8} {'':>8} {'':>9} {fmt(row['update_s']):>9} {'':>8} "
                             f"{fmt(row['peak_gib']):>9}  (x{fmt(row.get('peak_vs_plain'))} memory, "
                             f"x{fmt(row.get('time_vs_plain'))} time vs plain bf16)")
            continue
        lines.append(f"{part:<30} {r['status']:<8} {fmt(r.get('step_s')):>8} {fmt(r.get('rollout_s')):>9} "
                     f"{fmt(r.get('update_s')):>9} {fmt(r.get('tokens_per_s'), '.0f'):>8} {fmt(r.get('peak_gib')):>9}")
        if part == "trl" and results.get("grpo", {}).get("step_s") and r.get("step_s"):
            lines.append(f"  rlvr/TRL seconds per step: {results['grpo']['step_s'] / r['step_s']:.2f}")
        if part == "trl" and r.get("loss_check"):
            c = r["loss_check"]
            lines.append(f"  loss check: TRL {fmt(c.get('trl_loss'), '.3e')} rlvr {fmt(c.get('rlvr_loss'), '.3e')}, "
                         f"max |dlogp| {fmt(c.get('max_abs_logp_diff'), '.2e')}, grad cosine "
                         f"{fmt(c.get('grad_cosine'), '.6f')}")
        if part in ("grpo", "memory7b") and r.get("predicted_gib"):
            lines.append(f"  docs/scaling.md predicts {r['predicted_gib']:.1f} GiB for '{r['predicted_row']}'"
                         f" (measured/predicted {fmt(r.get('measured_over_predicted'))})")
        if r.get("error"):
            lines.append(f"  {r['error'].splitlines()[0][:300]}")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for gpu_check.json (created)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cpu: the dry run (tiny shapes, the GPU's options, the emulated accelerator)")
    parser.add_argument("--tokenizer", default="kit/tokenizer", help="tokenizer folder (default kit/tokenizer, "
                        "made by benchmarks/gpu_kit.sh)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply every part's time budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--completion-length", type=int, help="T of the training parts (default 512 on the GPU, 16 in "
                        "the dry run; the memory parts' responses are 1024 tokens, 16 in the dry run)")
    parser.add_argument("--budget-s", type=float, help="one budget in seconds for every part (the dry run included): "
                        "a test of the cut")
    parser.add_argument("--profile", action="store_true", help="torch.profiler over each rlvr part's first rollout: "
                        "the 25 costliest operations into the JSON")
    parser.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)  # one part, in its own process
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown or not args.parts:
        parser.error(f"--parts: unknown {unknown}; choose from {', '.join(PARTS)}")
    args.cuda = args.device == "cuda"
    args.tiny = not args.cuda
    big = not args.tiny
    args.prompts, args.generations = (8, 8) if big else (2, 4)
    args.completion_length = args.completion_length or (512 if big else 16)
    args.update_length = 1024 if big else 16  # memory7b, options: the documented rows' T
    args.micro_batch = 16 if big else 2  # a quarter of the step's responses, on the GPU and in the dry run
    args.steps = 2  # one warm-up, one timed
    args.rows = rows(64)
    if not Path(args.tokenizer).is_dir():
        parser.error(f"--tokenizer {args.tokenizer}: no such folder; make the kit first (bash benchmarks/gpu_kit.sh)")
    return args


def quiet_libraries() -> None:
    import logging
    import warnings

    import transformers

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


class Report:
    """OUT/gpu_check.json, written whole and atomically; a part's process writes its own record into it."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> dict:
        return json.loads(self.path.read_text())

    def write(self, report: dict) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str))
        os.replace(tmp, self.path)


def run_child(args) -> int:
    """One part in this process: its record into the report after every rollout and step."""
    quiet_libraries()
    register_models(args)
    report_file = Report(Path(args.out) / "gpu_check.json")
    report = report_file.read()
    record = report["results"][args.child]
    record.update(status="running", pid=os.getpid(), at_start=memory_now(args))

    def save() -> None:
        report_file.write(report)

    if part_budget(args, args.child):  # the parent's SIGUSR1 just before the cut: where the part stood
        stacks = stack_file(args, args.child).open("w")
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    discipline = contextlib.nullcontext()
    if args.tiny:  # the dry run: rlvr's device is the emulated accelerator, where the models live
        import rlvr.train.setup
        from rlvr.parallel.device_check import ON_DEVICE, DeviceDiscipline

        rlvr.train.setup.resolve_device = lambda name, **_: ON_DEVICE
        discipline = DeviceDiscipline() if args.child != "trl" else contextlib.nullcontext()  # TRL's: loss_check
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as work:
        args.work = Path(work)
        try:
            with discipline:
                RUN[args.child](args, record, save)
            record["status"] = "done"
        except Exception as error:  # noqa: BLE001  (recorded, and the exit code says it)
            record.update(status="failed", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        save()
    return 0 if record["status"] == "done" else 1


def part_budget(args, part: str) -> float | None:
    if args.budget_s:
        return args.budget_s
    return None if args.tiny else estimates(args)[part]["budget_s"]


def stack_file(args, part: str) -> Path:
    return Path(args.out) / f"stacks-{part}.txt"


def run_part(args, argv: list[str], part: str, budget_s: float | None, report_file: Report) -> None:
    """The part in a process group of its own, killed whole at its budget (nothing in it can catch that)."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv, "--child", part],
                             start_new_session=True)
    warn_s = None if budget_s is None else budget_s - min(3.0, budget_s / 10)
    try:
        rc = child.wait(timeout=warn_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGUSR1)  # its main thread's stack into the stack file (faulthandler)
        try:
            rc = child.wait(timeout=budget_s - warn_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            rc = None
    report = report_file.read()
    record = report["results"][part]
    record["wall_s"] = time.perf_counter() - start
    stacks = stack_file(args, part)
    if stacks.exists():  # the last dump of the part's threads (a cut part: where it stood)
        record["last_stacks"] = stacks.read_text()[-8000:] or None
        stacks.unlink()
    if rc is None:
        record.update(status="cut", error=f"cut at its budget of {budget_s:.0f} s (process group killed)")
    elif rc != 0 and record.get("status") != "failed":
        record.update(status="failed", error=f"the part's process ended with exit code {rc}")
    if record.get("steps"):
        summarise_steps(record)
    if record.get("predicted_gib") and record.get("peak_gib"):
        record["measured_over_predicted"] = record["peak_gib"] / record["predicted_gib"]
    report_file.write(report)
    print(f"[{part}] {record['status']} in {record['wall_s']:.0f} s"
          + (f": {record['error'].splitlines()[0][:300]}" if record.get("error") else ""), flush=True)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.cuda and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA device; on a CPU add --device cpu (tiny shapes)",
              file=sys.stderr)
        return 2
    if args.child:
        return run_child(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report_file = Report(out / "gpu_check.json")
    plan = estimates(args)
    report = {"environment": environment(args), "rates": RATES, "plan": {p: plan[p] for p in args.parts},
              "budgets_s": {}, "results": {}}
    print(f"gpu_check: {report['environment'].get('gpu', 'cpu (dry run: tiny shapes, the GPU options)')}, torch "
          f"{torch.__version__}; parts {', '.join(args.parts)}", flush=True)
    print_plan(args, plan)
    runs = split_parts(args, plan)
    if len(runs) > 1 and not args.tiny and not args.budget_s:
        commands = " and ".join(f"--parts {','.join(r)}" for r in runs)
        print(f"gpu_check: the budgets total more than one command's {COMMAND_LIMIT_S} s; run {len(runs)} commands: "
              f"{commands} (or fewer parts, or a smaller --budget-scale)", file=sys.stderr)
        return 2
    for part in args.parts:
        budget_s = part_budget(args, part)
        report["budgets_s"][part] = budget_s
        report["results"][part] = {"status": "starting"}
        report_file.write(report)
        print(f"[{part}] budget {fmt(budget_s, '.0f')} s ...", flush=True)
        run_part(args, argv, part, budget_s, report_file)
        report = report_file.read()
    print("\n" + table(report["results"]))
    print(f"\nwrote {report_file.path}")
    results = report["results"].values()
    failed = any(r["status"] == "failed" for r in results)
    finite = all(math.isfinite(s["train/loss"]) for r in results for s in r.get("steps", [])
                 if s.get("train/loss") is not None)
    return 1 if failed or not finite else 0


if __name__ == "__main__":
    sys.exit(main())
