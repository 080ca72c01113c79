"""``rlvr rephrase``: precompute TA-GRPO rephrasings of a dataset's questions into a JSONL file.

Thin: parse the arguments, build the rephraser (and the optional solver check), call
``rlvr.data.rephrase.rephrase_rows``, print its tally. Wiring into cli.py::

    add_rephrase_parser(sub)                      # in build_parser()
    if args.command == "rephrase":                # in main()
        return run_rephrase(args)

Exit codes: 0 done; 2 bad arguments, data or model, a generator that gives nothing for the
first questions, or an ``openai:`` endpoint that stops answering (OPENAI_GIVE_UP_AFTER requests
in a row fail for good); the message says which and the fix. Lines already written stay: rerun
the same command to resume.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rlvr.data import DEFAULT_INSTRUCTION, load_rows
from rlvr.data.rephrase import GenerationFailed, LLMRephraser, RuleRephraser, answers_equal, rephrase_rows

VIA_FORMS = "'rules', 'model:<path-or-alias>' or 'openai:<base_url>'"
REPHRASE_MAX_NEW_TOKENS = 512  # a rewritten problem: about the length of the original
SOLVER_MAX_NEW_TOKENS = 512  # a short worked solution ending in \boxed{}
OPENAI_TIMEOUT_S = 60.0  # per request, in all: connect, send and the whole reply
OPENAI_MAX_RETRIES = 2
OPENAI_GIVE_UP_AFTER = 5  # requests in a row failed for good (each after its retries): stop the run
LOCAL_BATCH_SIZE = 8

_EXAMPLES = """examples:
  rlvr rephrase --data gsm8k-100 --n 4 --via rules --out rephrasings.jsonl
  rlvr rephrase --data rg:chain_sum:size=500 --n 4 --k 8 --via rules --out chain_sum.jsonl
  rlvr rephrase --data gsm8k-100 --n 6 --via openai:http://127.0.0.1:8000/v1 \\
      --openai-model Qwen/Qwen2.5-7B-Instruct --solver model:smollm2-135m --out gsm8k_llm.jsonl

Each output line: {"id": ..., "rephrasings": [...], "rejected": {"reason": count}}.
Rerunning with the same --out resumes: questions already in the file are skipped."""


def add_rephrase_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``rephrase`` command to an ``add_subparsers()`` object; returns its parser."""
    parser = subparsers.add_parser(
        "rephrase",
        help="precompute TA-GRPO rephrasings of a dataset's questions",
        description="Generate K candidate rephrasings per question, keep up to N that preserve every "
        "number (and the answer, with --solver), drop near-duplicates, and append one JSON line per "
        "question to --out.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, help="dataset spec: gsm8k-100, rg:NAME[:key=value...], "
                        "a .jsonl/.json/.parquet file or a Hub id")
    parser.add_argument("--n", type=int, required=True, help="rephrasings kept per question (at most)")
    parser.add_argument("--via", required=True, help=f"generator: {VIA_FORMS}")
    parser.add_argument("--out", required=True, help="output .jsonl file (appended to; resumable)")
    parser.add_argument("--k", type=int, default=None, help="candidates per question (default 2·N)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rule transforms (default 0)")
    parser.add_argument("--openai-model", help="model name for --via openai:<base_url>")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY",
                        help="environment variable holding the API key (default OPENAI_API_KEY)")
    parser.add_argument("--timeout", type=float, default=OPENAI_TIMEOUT_S,
                        help=f"--via openai: seconds per request in all: connect, send and the whole reply "
                        f"(default {OPENAI_TIMEOUT_S:g})")
    parser.add_argument("--max-retries", type=int, default=OPENAI_MAX_RETRIES,
                        help=f"--via openai: retries of a request on timeouts, connection errors, 429 and 5xx "
                        f"(default {OPENAI_MAX_RETRIES}); after {OPENAI_GIVE_UP_AFTER} requests in a row fail "
                        "for good the run stops, keeping what it wrote")
    parser.add_argument("--allow-plain-http", action="store_true",
                        help="--via openai: send the API key over plain http:// to a host that is not loopback "
                        "(refused by default: anyone on the network path could read it)")
    parser.add_argument("--solver", help="model:<path-or-alias>: keep only rephrasings this model still "
                        "answers right (checked where it answers the original right)")
    return parser


def _split_via(via: str) -> tuple[str, str]:
    kind, _, target = via.partition(":")
    if via == "rules":
        return "rules", ""
    if kind in ("model", "openai") and target.strip():
        return kind, target.strip()
    raise ValueError(f"--via {via!r} is not one of {VIA_FORMS}")


def _check_args(args: argparse.Namespace) -> tuple[str, str]:
    kind, target = _split_via(args.via)
    if kind == "openai" and not args.openai_model:
        raise ValueError(f"--via {args.via} needs --openai-model NAME (the model name the server expects)")
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    if args.k is not None and args.k < args.n:
        raise ValueError(f"--k must be >= --n ({args.n}), got {args.k}: K candidates are filtered down to N")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if not args.timeout > 0 or args.timeout == float("inf"):
        raise ValueError(f"--timeout must be a number of seconds > 0, got {args.timeout}")
    if args.max_retries < 0:
        raise ValueError(f"--max-retries must be >= 0, got {args.max_retries}")
    if args.solver is not None and not (args.solver.startswith("model:") and args.solver[6:].strip()):
        raise ValueError(f"--solver {args.solver!r} must be 'model:<path-or-alias>'")
    return kind, target


def _local_backend(name: str, max_new_tokens: int):
    from rlvr.models import load_policy
    from rlvr.rewards.scorers import LocalModelBackend

    model, tokenizer = load_policy(name)
    return LocalModelBackend(model, tokenizer, max_new_tokens=max_new_tokens, batch_size=LOCAL_BATCH_SIZE)


def _rephraser(kind: str, target: str, args: argparse.Namespace):
    if kind == "rules":
        return RuleRephraser()
    if kind == "model":
        return LLMRephraser(_local_backend(target, REPHRASE_MAX_NEW_TOKENS))
    from rlvr.rewards.scorers import OpenAIChatBackend

    return LLMRephraser(OpenAIChatBackend(target, args.openai_model, api_key_env=args.api_key_env,
                                          timeout_s=args.timeout, max_retries=args.max_retries,
                                          max_tokens=REPHRASE_MAX_NEW_TOKENS, allow_plain_http=args.allow_plain_http,
                                          give_up_after=OPENAI_GIVE_UP_AFTER,
                                          on_failure="those candidates are dropped"))


class ModelSolver:
    """question → the final answer of a local model's greedy solution (``\\boxed{}``), or None."""

    def __init__(self, backend):
        self.backend = backend

    def __call__(self, question: str) -> str | None:
        from rlvr.rewards import extract_answer

        reply = self.backend.complete([f"{question}\n\n{DEFAULT_INSTRUCTION}"])[0]
        return None if reply is None else extract_answer(reply)


def _verified_match(pool) -> Callable[[str, str | None], bool]:
    def match(gold: str, prediction: str | None) -> bool:
        return prediction is not None and pool.verify_batch([gold], [prediction])[0].correct

    return match


def _endpoint_down(error: ConnectionError, args: argparse.Namespace) -> str:
    """One line: what failed, what was kept, and the fixes."""
    try:
        with open(args.out, "rb") as file:
            written = sum(1 for line in file if line.endswith(b"\n"))
    except OSError:
        written = 0
    base_url = args.via.partition(":")[2].strip().rstrip("/")
    return (f"{error}; the endpoint looks down, so the run stopped ({args.out} keeps the questions written so "
            f"far: {written}). Check that the server is up and serves --openai-model (curl {base_url}/models), raise "
            "--timeout if it is only slow, or use --via rules; then rerun the same command to resume")


def run_rephrase(args: argparse.Namespace) -> int:
    """Run ``rlvr rephrase`` (module docstring); returns the exit code."""
    pool = None
    try:
        kind, target = _check_args(args)
        rows = load_rows(args.data)
        rephraser = _rephraser(kind, target, args)
        solver, answers_match = None, answers_equal
        if args.solver is not None:
            from rlvr.rewards import VerifierPool

            solver = ModelSolver(_local_backend(args.solver[len("model:"):].strip(), SOLVER_MAX_NEW_TOKENS))
            pool = VerifierPool(num_workers=1)
            answers_match = _verified_match(pool)
        tally = rephrase_rows(rows, rephraser, n=args.n, k=args.k, seed=args.seed, out_path=args.out,
                              solver=solver, answers_match=answers_match)
    except (ValueError, GenerationFailed) as error:
        print(f"rlvr rephrase: error: {error}", file=sys.stderr)
        return 2
    # rlvr.rewards.bounded_http.EndpointDown, a ConnectionError (importing it here would load requests
    # for every rlvr command); no other ConnectionError gets out of a back end.
    except ConnectionError as error:
        print(f"rlvr rephrase: error: {_endpoint_down(error, args)}", file=sys.stderr)
        return 2
    finally:
        if pool is not None:
            pool.close()
    print(tally.summary())
    print(f"wrote {args.out}")
    return 0
