"""Run the same `rlvr train` command twice and print the first tensor that differs between the two runs.

    .venv/bin/python tools/first_difference.py max_steps=3              # the default job, 3 steps, twice
    .venv/bin/python tools/first_difference.py --deep model=tiny-random max_steps=2

Each run is a child process (same environment, same thread count) that trains with the given
``key=value`` overrides (``output_dir`` and ``save_steps=0`` added) and records, in order, a hash of
every tensor a step is made of:

- ``rollout``: each sampled response's token ids and sampling log-probs (the engine's ``generate``);
- ``grad/<param>``: every parameter's gradient just before the optimiser step;
- ``weight/<param>``: every parameter just after it;
- with ``--deep``: ``forward/<module>`` (the output of every module of the policy, in call order, in
  the update's forward passes), ``loss`` (every tensor ``backward`` is called on) and
  ``backward/<module>/grad_output|grad_input/<i>`` (every module's gradients, in backward order).

The first entry whose hash differs is printed with both runs' sum of its values (in float64) and the
entries just before it, so one reads where the runs part: in the sampling, in a forward, in a backward
(the gradients differ while every forward output is equal) or in the optimiser (weights differ while
the gradients are equal). Exit 0 when the two runs are bit-identical, 1 when they differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def digest(tensor) -> tuple[str, float]:
    """(sha1 of the bytes, float64 sum) of a tensor."""
    import torch

    t = tensor.detach().cpu().contiguous()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1)
    return hashlib.sha1(raw.numpy().tobytes()).hexdigest()[:16], float(t.double().sum()) if t.numel() else 0.0


class Recorder:
    def __init__(self, path: Path):
        self.file = path.open("w")
        self.recording_forward = False

    def add(self, label: str, tensor) -> None:
        sha, total = digest(tensor)
        self.file.write(json.dumps({"label": label, "sha": sha, "sum": total}) + "\n")


def install(trainer, recorder: Recorder, deep: bool) -> None:
    """Hooks on the trainer's engine, policy and optimiser (this tool only: nothing in rlvr knows of them)."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    names = {id(p): name for name, p in trainer.policy.named_parameters()}
    generate = trainer.engine.generate

    def traced_generate(*args, **kwargs):
        completions = generate(*args, **kwargs)
        for i, c in enumerate(completions):
            recorder.add(f"rollout/{i}/tokens", torch.tensor(c.token_ids, dtype=torch.int64))
            recorder.add(f"rollout/{i}/logprobs", torch.tensor(c.logprobs, dtype=torch.float32))
        return completions

    trainer.engine.generate = traced_generate

    def params(optimizer):
        return [p for group in optimizer.param_groups for p in group["params"]]

    def before_step(optimizer, args, kwargs):
        for p in params(optimizer):
            if p.grad is not None:
                recorder.add(f"grad/{names.get(id(p), '?')}", p.grad)

    def after_step(optimizer, args, kwargs):
        for p in params(optimizer):
            recorder.add(f"weight/{names.get(id(p), '?')}", p)

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)
    if not deep:
        return
    for name, module in trainer.policy.named_modules():
        def forward_hook(module, inputs, output, name=name):
            if torch.is_grad_enabled():  # the update's forwards (generation runs without grad)
                value = output[0] if isinstance(output, tuple) else getattr(output, "logits", output)
                if isinstance(value, torch.Tensor):
                    recorder.add(f"forward/{name or 'model'}", value)

        def backward_hook(module, grad_input, grad_output, name=name):
            for kind, grads in (("grad_output", grad_output), ("grad_input", grad_input)):
                for i, grad in enumerate(grads):
                    if isinstance(grad, torch.Tensor):
                        recorder.add(f"backward/{name or 'model'}/{kind}/{i}", grad)

        module.register_forward_hook(forward_hook)
        module.register_full_backward_hook(backward_hook)
    backward = torch.Tensor.backward

    def traced_backward(self, *args, **kwargs):
        recorder.add("loss", self)
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = traced_backward


def child(out: Path, overrides: list[str], deep: bool) -> None:
    import rlvr  # noqa: F401  (before torch: rlvr's OpenMP set-up, as the `rlvr` command does)
    from rlvr.config import load_config
    from rlvr.train.trainer import Trainer

    recorder = Recorder(out / "trace.jsonl")
    cfg = load_config(None, [*overrides, f"output_dir={out / 'run'}", "save_steps=0", "progress_bar=false"])
    trainer = Trainer(cfg)
    install(trainer, recorder, deep)
    trainer.train()
    recorder.file.close()


def compare(a: Path, b: Path, context: int = 3) -> int:
    left = [json.loads(line) for line in a.read_text().splitlines()]
    right = [json.loads(line) for line in b.read_text().splitlines()]
    for i, (x, y) in enumerate(zip(left, right)):
        if x["label"] != y["label"]:
            print(f"entry {i}: the runs took different paths: {x['label']} vs {y['label']}")
            return 1
        if x["sha"] != y["sha"]:
            print(f"first difference: entry {i} of {len(left)}: {x['label']}")
            print(f"  sums: {x['sum']!r} vs {y['sum']!r} (difference {x['sum'] - y['sum']:.3e})")
            print("  the entries just before it are equal: " + ", ".join(e["label"] for e in left[max(0, i - context):i]))
            later = [p["label"] for p, q in zip(left[i:], right[i:]) if p["sha"] != q["sha"]]
            print(f"  {len(later)} of the {len(left) - i} entries from there on differ; the first ones: "
                  + ", ".join(later[:8]))
            return 1
    if len(left) != len(right):
        print(f"the traces have different lengths: {len(left)} vs {len(right)}")
        return 1
    print(f"the two runs are bit-identical: {len(left)} tensors")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deep", action="store_true", help="also every module's output and every loss")
    parser.add_argument("--keep", help="write the two traces (a/trace.jsonl, b/trace.jsonl) under this folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="key=value, as for `rlvr train`")
    args = parser.parse_args(argv)
    if args.child:
        child(Path(args.child), args.overrides, args.deep)
        return 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="first_difference_") as scratch:
        tmp = args.keep or scratch
        runs = []
        for name in ("a", "b"):
            out = Path(tmp) / name
            out.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, __file__, "--child", str(out), *(["--deep"] if args.deep else []),
                       *args.overrides]
            print(f"run {name}: {' '.join(args.overrides) or '(the default job)'}", flush=True)
            proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 2
            runs.append(out / "trace.jsonl")
        return compare(*runs)


if __name__ == "__main__":
    sys.exit(main())
