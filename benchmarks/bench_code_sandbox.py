"""Test executions per second on HumanEval's canonical solutions: rlvr's sandbox vs a plain subprocess per case vs
verl's prime_code, on the same programs, with the same number of programs in flight.

    python benchmarks/bench_code_sandbox.py [--workers 2] [--repeats 3] [--problems 164]

Each execution is one HumanEval problem: its prompt + canonical solution + test + ``check(entry_point)``.

- ``rlvr sandbox``: ``SandboxPool`` (namespaces) ``run_many``, ``workers`` warm workers (a fork per program);
- ``plain subprocess``: ``subprocess.run([python, "-c", program])`` per program, from ``workers`` threads
  (no isolation at all: the floor a sandbox is measured against);
- ``verl prime_code``: ``compute_score(program, {"inputs": [""], "outputs": [""]})`` per program from
  ``workers`` threads (verl's executor: a ``multiprocessing.Process`` + ``Manager`` per call, APPS's runner;
  the program prints nothing, so the empty expected output passes).

Also a trivial program (``pass``) through the sandbox and a plain subprocess: the fixed cost per execution.
Prints a markdown table (docs/performance.md, "Code sandbox"); all three must pass every program.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlvr.data import load_rows
from rlvr.rewards.code_rewards import program
from rlvr.rewards.sandbox import Job, SandboxPool
from rlvr.rewards.verl_code import load_verl_prime_code


def programs(limit: int) -> list[str]:
    rows = load_rows("humaneval")[:limit]
    return [program(row["code_prompt"], row["canonical_solution"], row["entry_point"])
            + f"\n\n{row['test']}\ncheck({row['entry_point']})\n" for row in rows]


def run_sandbox(pool: SandboxPool, sources: list[str]) -> int:
    return sum(outcome.ok for outcome in pool.run_many([Job(source) for source in sources]))


def run_plain(sources: list[str], workers: int) -> int:
    def one(source: str) -> bool:
        return subprocess.run([sys.executable, "-c", source], check=False, capture_output=True, timeout=10).returncode == 0

    with ThreadPoolExecutor(workers) as executor:
        return sum(executor.map(one, sources))


def run_verl(prime_code, sources: list[str], workers: int) -> int:
    cases = json.dumps({"inputs": [""], "outputs": [""]})

    def one(source: str) -> bool:
        return float(prime_code.compute_score(source, cases, continuous=True)[0]) == 1.0

    with ThreadPoolExecutor(workers) as executor:
        return sum(executor.map(one, sources))


def timed(fn, repeats: int) -> tuple[float, int]:
    """Best wall time of ``repeats`` runs (the machine is shared), and the passes of the last."""
    best, passed = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        passed = fn()
        best = min(best, time.perf_counter() - start)
    return best, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--problems", type=int, default=164)
    args = parser.parse_args()
    sources = programs(args.problems)
    trivial = ["pass\n"] * len(sources)
    prime_code = load_verl_prime_code()
    with SandboxPool("namespaces", workers=args.workers) as pool:
        run_sandbox(pool, sources[:4])  # warm: the workers' first fork
        rows = [("rlvr sandbox (namespaces, warm pool)", *timed(lambda: run_sandbox(pool, sources), args.repeats)),
                ("plain subprocess per case", *timed(lambda: run_plain(sources, args.workers), args.repeats)),
                ("verl prime_code.compute_score", *timed(lambda: run_verl(prime_code, sources, args.workers),
                                                         args.repeats)),
                ("rlvr sandbox, `pass`", *timed(lambda: run_sandbox(pool, trivial), args.repeats)),
                ("plain subprocess, `pass`", *timed(lambda: run_plain(trivial, args.workers), args.repeats))]
    plain = rows[1][1]
    print(f"{len(sources)} HumanEval programs, {args.workers} in flight, best of {args.repeats}, "
          f"{os.cpu_count()} CPUs\n")
    print("| executor | seconds | executions/s | time vs plain subprocess | passed |")
    print("|---|---|---|---|---|")
    for name, seconds, passed in rows:
        base = plain if "`pass`" not in name else rows[4][1]
        print(f"| {name} | {seconds:.2f} | {len(sources) / seconds:.0f} | {seconds / base:.2f}x | "
              f"{passed}/{len(sources)} |")


if __name__ == "__main__":
    main()
