"""Rollout time with the python tool: the same rollout without tool calls, with the calls run in rlvr's sandbox
(``tools=python``; TRL's rounds, and ``tool_scheduling=rows``), and with each call run in a fresh plain subprocess
(no isolation: the floor).

    python benchmarks/bench_tools.py [--model smollm2-135m] [--rows 16] [--calls 2] [--turn-tokens 48] [--repeats 2]
                                     [--sleep 0]

The model generates every turn (rlvr's engine, sampling at temperature 1, seeded); to make each response call
the tool ``--calls`` times whatever the model wants, each turn is cut at ``--turn-tokens`` tokens and a fixed cell
(a small computation, as a model writes one) is appended as if the model had written it. The rollout without
tools generates the same number of turns' tokens in one turn. Reported: seconds (best of ``--repeats``), the
model's tokens, the calls, and the time against the rollout without tools.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlvr.models import load_policy
from rlvr.rewards.sandbox import shared_pool
from rlvr.rewards.sandbox.notebook import PROGRAM, PythonNotebook
from rlvr.rollout import build_engine
from rlvr.rollout.completion import Completion
from rlvr.rollout.sampling import Sampling
from rlvr.rollout.tool_loop import MarkdownPython, ToolLoop, notebook_runner

CELL = "```python\nx = sum(i * i for i in range(20000))\nprint(x % 997)\n```"


class ForcedCalls:
    """The engine, each turn cut at ``turn_tokens`` tokens and followed by :data:`CELL` until ``calls`` were made."""

    def __init__(self, engine, tokenizer, *, turn_tokens: int, calls: int, cell: str = CELL):
        self.engine, self.tokenizer, self.turn_tokens, self.calls = engine, tokenizer, turn_tokens, calls
        self.cell = tokenizer.encode("\n" + cell, add_special_tokens=False)

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, *, max_new_tokens, sampling, generator_seed=None, row_seeds=None):
        out = self.engine.generate(prompts, max_new_tokens=min(self.turn_tokens, max_new_tokens), sampling=sampling,
                                   generator_seed=generator_seed, row_seeds=row_seeds)
        forced = []
        for prompt, completion in zip(prompts, out):
            made = self.tokenizer.decode(prompt).count("```output\n")
            tokens = [t for t in completion.token_ids if t not in self.engine.eos_token_ids]
            if made < self.calls:
                tokens = tokens + self.cell
            forced.append(Completion(tokens, [0.0] * len(tokens), False))
        return forced


def plain_runner(workers: int):
    """Each call in a fresh ``python -c`` (the notebook's own program, so the same cells replay): no isolation."""
    def run(requests):
        def one(request):
            earlier, cell = request
            source = PROGRAM.replace("__CELLS__", repr(__import__("json").dumps([*earlier, cell])))
            done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=20,
                                  check=False)
            return done.stdout + done.stderr, done.returncode != 0
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, requests))
    return run


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--turn-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers = plain subprocesses in flight")
    parser.add_argument("--sleep", type=float, default=0.0,
                        help="each cell also sleeps a random 0..SLEEP s (a slow tool: an API, a long computation)")
    args = parser.parse_args()
    model, tokenizer = load_policy(args.model)
    engine = build_engine("rlvr", model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[tokenizer.eos_token_id])
    text = tokenizer.apply_chat_template([{"role": "system", "content": MarkdownPython.instruction},
                                          {"role": "user", "content": "What is the sum of the first 20000 squares, "
                                                                      "modulo 997?"}],
                                         add_generation_prompt=True, tokenize=False)
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"]] * args.rows
    sampling, seeds = Sampling(temperature=1.0), list(range(args.rows))
    notebook = PythonNotebook(output_chars=256, workers=args.workers)
    shared_pool("namespaces", args.workers)  # started before the clock
    cell = CELL if not args.sleep else CELL.replace("```python\n", "```python\nimport random, time\n"
                                                     f"time.sleep(random.uniform(0, {args.sleep}))\n", 1)
    forced = ForcedCalls(engine, tokenizer, turn_tokens=args.turn_tokens, calls=args.calls, cell=cell)
    budget = (args.calls + 1) * args.turn_tokens + args.calls * (len(forced.cell) + 64)  # turns, cells and results
    settings = {
        "no tool calls (one turn, the same tokens)": lambda: engine.generate(
            prompts, max_new_tokens=(args.calls + 1) * args.turn_tokens, sampling=sampling, row_seeds=seeds),
        "python tool in rlvr's sandbox": lambda: ToolLoop(
            forced, tokenizer, {"python": notebook_runner(notebook.run_cells)}, tool_format=MarkdownPython(tokenizer)
        ).generate(prompts, max_new_tokens=budget, sampling=sampling, row_seeds=seeds),
        "python tool in rlvr's sandbox, tool_scheduling=rows": lambda: ToolLoop(
            forced, tokenizer, {"python": notebook_runner(notebook.run_cells)}, tool_format=MarkdownPython(tokenizer),
            scheduling="rows", tool_workers=args.rows
        ).generate(prompts, max_new_tokens=budget, sampling=sampling, row_seeds=seeds),
        "python tool, a fresh plain subprocess per call": lambda: ToolLoop(
            forced, tokenizer, {"python": notebook_runner(plain_runner(args.workers))}, tool_format=MarkdownPython(tokenizer)
        ).generate(prompts, max_new_tokens=budget, sampling=sampling, row_seeds=seeds),
    }
    rows = []
    for name, run in settings.items():
        run()  # warm
        seconds, out = timed(run, args.repeats)
        calls = sum(c.tool_use.calls for c in out if c.tool_use is not None)
        model_tokens = sum(len(c.token_ids) if c.tool_mask is None else sum(c.tool_mask) for c in out)
        model_tokens -= calls * len(forced.cell)  # the tokens the model generated (the cells were forced)
        failures = sum(c.tool_use.failures for c in out if c.tool_use is not None)
        in_tools = max((c.tool_use.seconds for c in out if c.tool_use is not None), default=0.0)  # every row waits
        rows.append((name, seconds, model_tokens, calls, failures, in_tools))  # for every round here
    base = rows[0][1]
    print(f"{args.model}, {args.rows} responses, {args.calls} calls each, turns of {args.turn_tokens} tokens, "
          f"{args.workers} sandbox workers, cells sleeping 0..{args.sleep:g} s, best of {args.repeats}, "
          f"{os.cpu_count()} CPUs\n")
    print("| rollout | seconds | tokens generated | calls (failed) | seconds in tool calls | time vs no tool calls |")
    print("|---|---|---|---|---|---|")
    for name, seconds, tokens, calls, failures, in_tools in rows:
        print(f"| {name} | {seconds:.2f} | {tokens} | {calls} ({failures}) | {in_tools:.2f} | {seconds / base:.2f}x |")
    print(f"\nin tool calls: the sandbox {rows[1][5] / max(rows[3][5], 1e-9):.2f}x a fresh plain subprocess per call; "
          "the rest of the difference to one turn is the engine's: a turn re-reads prompt + response so far "
          "(prefill) and the rounds are smaller batches. tool_scheduling=rows against rounds: "
          f"{rows[2][1] / rows[1][1]:.2f}x the time (its calls run while other rows generate; its batches are smaller)")


if __name__ == "__main__":
    main()
