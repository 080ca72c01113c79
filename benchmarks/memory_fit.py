"""What fits on 80 GB GPUs: docs/scaling.md's "What fits" table, from counted activations and arithmetic.

    python benchmarks/memory_fit.py            # count the activations (CPU, ~1 min), print the tables
    python benchmarks/memory_fit.py --json F   # also write the counts and every cell to F

Two parts, kept apart so the docs can say which number is which:

1. **Counted** (on this CPU): the bytes autograd saves per token and per decoder layer, for
   Qwen2.5-1.5B's and -7B's layer shapes (random weights, 3 layers minus 1 layer, a 2 x 32-token
   batch with a padded row, ``torch.autograd.graph.saved_tensors_hooks``, parameters and their casts
   excluded, each storage counted once), in four precisions: fp32; pure bf16 (``dtype=bfloat16``);
   bf16 mixed in one process (fp32 weights under autocast: the residual stream stays fp32); bf16
   mixed under FSDP2 (bf16 gathered weights under autocast); and PEFT LoRA r=16 on a bf16 base. CUDA's attention kernels save the same
   q, k, v, output and log-sum-exp, so GPU figures should be close, but they were not measured.
2. **Arithmetic** (not measured on any GPU): per-GPU peaks of the update and of the rollout, per
   option, from the parameter counts, those per-token counts and rlvr's code (what it allocates and
   keeps, spelled out in ``update_gib`` and ``rollout_gib``).

An "80 GB" card offers about 79 GiB to torch; a cell fits when both peaks are <= 75 GiB (the rest
for the CUDA context, NCCL buffers and fragmentation: a rule of thumb).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

GIB = 2**30
BUDGET_GIB = 75.0
SHAPES = {  # parameters counted from Qwen2ForCausalLM built on the meta device with each config
    "1.5B": dict(layers=28, hidden=1536, intermediate=8960, heads=12, kv_heads=2, head_dim=128, vocab=151936,
                 tied=True, params=1_543_714_304),
    "7B": dict(layers=28, hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128, vocab=152064,
               tied=False, params=7_615_616_512),
}
PRECISIONS = ("fp32", "bf16", "mixed", "mixed_fsdp", "bf16_lora")


def count_activations(shape: dict, precision: str, tokens: int = 32) -> float:
    """Bytes autograd saves per token per decoder layer (3 layers minus 1), parameters excluded."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def saved_bytes(layers: int) -> int:
        config = Qwen2Config(hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                             num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                             num_hidden_layers=layers, vocab_size=512, tie_word_embeddings=True,
                             attn_implementation="sdpa")
        torch.manual_seed(0)
        weights = torch.float32 if precision in ("fp32", "mixed") else torch.bfloat16
        model = Qwen2ForCausalLM(config).to(weights)
        if precision == "bf16_lora":  # PEFT's adapters (fp32 on the bf16 base), as rlvr's lora_r=16 builds them
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
        params = {p.data_ptr() for p in model.parameters()}
        ids = torch.randint(0, 512, (2, tokens))
        mask = torch.ones_like(ids)
        mask[1, : tokens // 4] = 0  # a left-padded row, as the scoring batches have
        seen, total = set(), 0

        def pack(t):
            nonlocal total
            # a parameter, or autocast's bf16 cast of one (as large as a weight: counted per parameter)
            is_weight = t.data_ptr() in params or (t.dim() == 2 and tuple(t.shape) in weight_shapes)
            key = t.untyped_storage().data_ptr()
            if not is_weight and key not in seen:
                seen.add(key)
                total += t.untyped_storage().nbytes()
            return t

        weight_shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
        autocast = precision in ("mixed", "mixed_fsdp")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits.float().sum()
        return total

    return (saved_bytes(3) - saved_bytes(1)) / 2 / (2 * tokens)


@dataclass(frozen=True)
class Setting:
    model: str
    lora: bool
    precision: str  # "bf16" (dtype=bfloat16), "fp32", "mixed" (bf16=true)
    beta: float
    n: int  # responses per micro-batch
    checkpointing: bool
    chunked_head: bool
    T: int = 1024  # response tokens
    prompt: int = 256  # prompt tokens, each distinct prompt scored once
    lora_params: dict | None = None

    def label(self) -> str:
        train = "LoRA r=16" if self.lora else "full"
        precision = {"bf16": "dtype=bfloat16", "fp32": "fp32", "mixed": "bf16=true"}[self.precision]
        options = "+".join(o for o, on in (("ckpt", self.checkpointing), ("chunk", self.chunked_head)) if on) or "none"
        return f"{self.model} {train}, {precision}, β = {self.beta:g}, n = {self.n}, T = {self.T}, {options}"


LORA_PARAMS = {"1.5B": 18_464_768, "7B": 40_370_176}  # r=16 on every Linear but the LM head


def _per_param_bytes(s: Setting) -> tuple[float, float]:
    """(weight bytes, gathered/compute weight bytes) per parameter."""
    master = 2 if s.precision == "bf16" else 4
    return master, (2 if s.precision != "fp32" else 4)


def update_gib(s: Setting, acts: dict, parallelism: str, world: int = 8) -> float:
    shape, P = SHAPES[s.model], SHAPES[s.model]["params"]
    shards = world if parallelism == "fsdp" else 1
    master, compute = _per_param_bytes(s)
    fsdp = parallelism == "fsdp"
    if s.lora:
        A = LORA_PARAMS[s.model]
        state = (P * 2) / shards + A * 16 / shards  # frozen bf16 base (weights only) + fp32 adapters with grads/AdamW
        reference = 0.0  # the base with the adapters off
        weight_copies = 0.0
    else:
        state = P * (master * 4) / shards  # weights + gradients (same dtype) + AdamW's two states
        ref_bytes = 2 if (s.precision == "bf16" or (s.precision == "mixed" and fsdp)) else 4
        reference = P * ref_bytes if s.beta > 0 else 0.0  # whole on every rank
        # bf16=true without FSDP: autocast's bf16 casts of every weight live to the forward's end
        weight_copies = P * 2 if (s.precision == "mixed" and not fsdp) else 0.0
    if fsdp:  # unsharded working set: embeddings + head (the root) and about two decoder layers
        layer = (P - shape["vocab"] * shape["hidden"] * (1 if shape["tied"] else 2)) / shape["layers"]
        root = shape["vocab"] * shape["hidden"] * (1 if shape["tied"] else 2)
        state += (root + 2 * layer) * (2 if s.lora else compute)
    precision = "mixed_fsdp" if (s.precision == "mixed" and fsdp) else s.precision
    key = f"{precision}_lora" if s.lora else precision
    per_layer = acts[s.model].get(key, acts[s.model][precision])
    tokens = s.n * (s.T + s.prompt)
    if s.checkpointing:  # each layer keeps its input; one layer's activations during its recompute
        hidden_bytes = 4 if precision in ("fp32", "mixed") else 2
        activations = tokens * shape["layers"] * shape["hidden"] * hidden_bytes + tokens * per_layer
    else:
        activations = tokens * shape["layers"] * per_layer
    V = shape["vocab"]
    if s.chunked_head:  # one [1024, V] fp32 block and its softmax/gradient (+ its bf16 product)
        logits = 1024 * V * (8 + (2 if s.precision != "fp32" else 0))
    else:  # fp32 logits of every response token, kept to the backward, and their gradient
        logits = s.n * s.T * V * (8 + (2 if s.precision != "fp32" else 0))
    return (state + reference + weight_copies + activations + logits) / GIB


def rollout_gib(s: Setting, parallelism: str, world: int = 8) -> float:
    shape, P = SHAPES[s.model], SHAPES[s.model]["params"]
    fsdp = parallelism == "fsdp"
    shards = world if fsdp else 1
    master, compute = _per_param_bytes(s)
    if s.lora:
        A = LORA_PARAMS[s.model]
        state = P * 2 / shards + A * 12 / shards  # base + adapters' weights and AdamW (gradients freed)
        gathered = (P * 2 + A * 4) if fsdp else 0.0
        reference, copies = 0.0, 0.0
    else:
        grads_kept = P * master if parallelism == "ddp" else 0.0  # DDP keeps its gradient buckets
        state = P * master * 3 / shards + grads_kept  # weights + AdamW
        gathered = P * compute if fsdp else 0.0  # the full weights, all-gathered for generation
        ref_bytes = 2 if (s.precision == "bf16" or (s.precision == "mixed" and fsdp)) else 4
        reference = P * ref_bytes if s.beta > 0 else 0.0
        copies = P * 2 if (s.precision == "mixed" and not fsdp) else 0.0  # autocast's casts during generation
    kv_bytes = 4 if s.precision == "fp32" else 2
    kv = 64 * (s.prompt + s.T) * 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * kv_bytes
    return (state + gathered + reference + copies + kv) / GIB


ROWS = [
    # the options off (the old table), then on
    Setting("1.5B", False, "bf16", 0.04, 4, False, False),
    Setting("1.5B", False, "mixed", 0.04, 4, False, False),
    Setting("1.5B", False, "mixed", 0.04, 4, True, True),
    Setting("1.5B", False, "mixed", 0.04, 8, True, True, T=4096),
    Setting("1.5B", True, "bf16", 0.04, 4, True, True),
    Setting("7B", False, "bf16", 0, 4, False, False),
    Setting("7B", False, "mixed", 0, 4, False, False),
    Setting("7B", False, "mixed", 0, 4, True, True),
    Setting("7B", False, "mixed", 0.04, 4, True, True),
    Setting("7B", False, "mixed", 0, 8, True, True, T=4096),
    Setting("7B", False, "fp32", 0.04, 4, True, True),
    Setting("7B", True, "bf16", 0.04, 4, False, False),
    Setting("7B", True, "bf16", 0.04, 8, True, True, T=4096),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the counts and the cells here")
    args = parser.parse_args()
    acts = {}
    for model, shape in SHAPES.items():
        acts[model] = {p: count_activations(shape, p) for p in PRECISIONS}
        print(f"counted, bytes per token per layer, {model}: " + ", ".join(f"{k} {v:,.0f}" for k, v in acts[model].items()),
              flush=True)
    cells = []
    print("\n| setting | 1 × 80 GB | 8 × 80 GB, `ddp` | 8 × 80 GB, `fsdp` |\n|---|---|---|---|")
    for s in ROWS:
        row = [s.label()]
        for parallelism in ("one", "ddp", "fsdp"):
            u, r = update_gib(s, acts, parallelism), rollout_gib(s, parallelism)
            fits = max(u, r) <= BUDGET_GIB
            row.append(f"{u:.1f} / {r:.1f} {'yes' if fits else 'no'}")
            cells.append({"setting": s.label(), "parallelism": parallelism, "update_gib": u, "rollout_gib": r,
                          "fits": fits})
        print("| " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"activations_bytes_per_token_per_layer": acts, "cells": cells}, f, indent=1)


if __name__ == "__main__":
    main()
