"""What repeatability costs: the scoring pass with each response's prompt rows made by a one-hot product
(rlvr's, deterministic) against plain indexing (whose backward's summation order varied with CPU load).

Run alone (from the repository root):

    .venv/bin/python benchmarks/bench_first_token_rows.py                 # SmolLM2-135M, 4 prompts x 8, 128 tokens
    .venv/bin/python benchmarks/bench_first_token_rows.py --repeats 3 --tokens 64

One micro-batch as the trainer scores it (`rlvr.train.batching.response_logprobs`: the shared
prompt pass, then the responses reading its keys/values), forward and backward of the mean log-prob,
timed for both ways of giving each response its prompt's rows (the first-token logits and every layer's
keys/values), alternating so background load hits both alike. Prints the median of each and the ratio,
and checks that both give the same log-probs and gradients.
"""

from __future__ import annotations

import os

import rlvr  # noqa: F401  (before torch: rlvr's OpenMP set-up)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import statistics
import time

import torch


def indexed_rows(onehot: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The alternative: plain indexing (backward: index_put with accumulate=True)."""
    return values[onehot.argmax(dim=1)]


def one_pass(model, batch) -> tuple[float, torch.Tensor, torch.Tensor]:
    from rlvr.train.batching import response_logprobs

    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    logps, _ = response_logprobs(model, batch, temperature=1.0)
    (logps * batch.response_mask).sum().div(batch.response_mask.sum()).backward()
    seconds = time.perf_counter() - start
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    return seconds, logps.detach(), grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128, help="response tokens")
    parser.add_argument("--prompt-tokens", type=int, default=70)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from rlvr.models import load_policy
    from rlvr.train import response_logprobs as module
    from rlvr.train.batching import collate

    model, tokenizer = load_policy("smollm2-135m")
    model.eval()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.prompts)]
    responses = [torch.randint(0, vocab, (args.tokens,), generator=gen).tolist()
                 for _ in range(args.prompts * args.generations)]
    batch = collate([p for p in prompts for _ in range(args.generations)], responses,
                    pad_token_id=tokenizer.pad_token_id or 0)
    one_hot = module._per_row
    times = {"one-hot (rlvr)": [], "indexing": []}
    results = {}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, rows in (("one-hot (rlvr)", one_hot), ("indexing", indexed_rows)):
            module._per_row = rows
            seconds, logps, grad = one_pass(model, batch)
            times[name].append(seconds)
            results[name] = (logps, grad)
    module._per_row = one_hot
    (a_logp, a_grad), (b_logp, b_grad) = results.values()
    for name, values in times.items():
        print(f"{name:<16} median {statistics.median(values[1:]):.3f} s  (min {min(values[1:]):.3f}, "
              f"{args.repeats} repeats)")
    ratio = statistics.median(times["one-hot (rlvr)"][1:]) / statistics.median(times["indexing"][1:])
    print(f"one-hot / indexing: {ratio:.3f}")
    print(f"same log-probs: {torch.equal(a_logp, b_logp)}; max |grad diff| {float((a_grad - b_grad).abs().max()):.2e}")


if __name__ == "__main__":
    main()
