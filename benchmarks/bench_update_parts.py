"""Where the time of rlvr's policy update goes: the pieces of one scoring forward, backward, AdamW step.

Run (from the repository root, after `make setup`):

    .venv/bin/python benchmarks/bench_update_parts.py                  # 32 x (65 + 128) tokens, fp32
    .venv/bin/python benchmarks/bench_update_parts.py --dtype bfloat16 --threads 1

It rebuilds what `rlvr.train.batching.score` + `update.PolicyUpdate.optimizer_step` do on one micro-batch of random
token ids (SmolLM2-135M, batch x (prompt + completion) tokens), timing each piece separately:

  body      the transformer stack, with grad (model.model)
  lm_head   the LM head on the completion positions only (logits_to_keep)
  logprobs  rlvr.core.logprobs.token_logprobs (fp32 copy, gather, logsumexp over the vocabulary)
  entropy   rlvr.core.logprobs.entropy_from_logits (no grad; a metric, a full pass over [n, T, V])
  backward  of the mean log-prob
  AdamW     torch.optim.AdamW step as rlvr builds it (defaults: single-tensor on CPU), and with
            foreach=True and fused=True, for comparison (second call of each, after state init)

This is a script, not a test. Timings on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import argparse
import statistics
import sys
import time
import warnings

import torch

from rlvr.core.logprobs import entropy_from_logits, token_logprobs
from rlvr.models import load_policy, smollm2_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32, help="sequences (default 32 = 4 prompts x 8)")
    parser.add_argument("--prompt-length", type=int, default=65, help="prompt tokens (default 65, chain_sum)")
    parser.add_argument("--completion-length", type=int, default=128, help="completion tokens (default 128)")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16")
    parser.add_argument("--repeats", type=int, default=2, help="repeats; medians (default 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model, _ = load_policy(str(smollm2_path()), dtype=args.dtype)
    model.eval()
    n, p, t = args.batch, args.prompt_length, args.completion_length
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40000, (n, p + t), generator=generator)  # [n, P + T]
    attention = torch.ones_like(ids)
    times: dict[str, list[float]] = {}

    def timed(label, fn, *fn_args, **fn_kwargs):
        start = time.perf_counter()
        out = fn(*fn_args, **fn_kwargs)
        times.setdefault(label, []).append(time.perf_counter() - start)
        return out

    params = list(model.parameters())
    optimisers = {
        "AdamW default (rlvr)": torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.99)),
        "AdamW foreach=True": torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.99), foreach=True),
        "AdamW fused=True": torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.99), fused=True),
    }
    print(f"bench_update_parts: {args.dtype}, {n} x ({p} + {t}) tokens, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)", flush=True)
    for _ in range(args.repeats):
        hidden = timed("body forward (grad)", model.model, input_ids=ids, attention_mask=attention,
                       use_cache=False).last_hidden_state
        logits = timed("lm_head, completion positions", model.lm_head, hidden[:, -(t + 1):, :])[:, :-1]
        logprobs = timed("token_logprobs", token_logprobs, logits, ids[:, p:])
        with torch.no_grad():
            timed("entropy_from_logits", entropy_from_logits, logits.detach())
        loss = logprobs.mean()
        timed("backward", loss.backward)
        for label, optimiser in optimisers.items():
            optimiser.step()  # first call initialises the state
            timed(f"{label} step", optimiser.step)
        model.zero_grad(set_to_none=True)
        hidden = logits = logprobs = loss = None  # free the graph before the next repeat
    width = max(len(k) for k in times)
    for label, values in times.items():
        print(f"  {label:<{width}} {statistics.median(values):7.2f} s   (runs: "
              + ", ".join(f"{v:.2f}" for v in values) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
