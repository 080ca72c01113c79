"""``rlvr eval``: pass@k of a model on one or more datasets, written to a JSON file.

Thin: parse the arguments; check --out and the resume file's settings, load the datasets (all
before the model: fail fast); load the model; call ``rlvr.eval.evaluate``. Wiring into cli.py::

    add_eval_parser(sub)                          # in build_parser()
    if args.command == "eval":                    # in main()
        return run_eval(args)

Standalone: ``python -m rlvr.eval_cli --model ... --data ... --out ...``.
Exit codes: 0 done; 2 bad arguments, an --out that cannot be written, an unknown or unloadable
dataset or model, or a results file written with other settings (the message says which and the
fix; all of these are found before the model loads, except a model that does not load);
130 / 143 stopped by SIGINT (Ctrl-C) / SIGTERM, after one line saying what is saved. Finished
problems are already in OUT.problems.jsonl (each line fsynced), so the same command continues.
A second signal during that clean-up exits at once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
from pathlib import Path

from rlvr.config import DataConfig, EvalConfig, ModelConfig, RewardConfig, RunConfig
from rlvr.rewards.extract import DEFAULT_EXTRACTION, EXTRACTION_MODES
from rlvr.rewards.sandbox import SANDBOX_MODES
from rlvr.run.checkpoint_files import list_checkpoints

# A standalone evaluation samples more, and longer, responses than the one during training
# (eval_n, and eval_max_completion_length = the training length): these two are its own.
DEFAULT_N = 16
DEFAULT_MAX_COMPLETION_LENGTH = 1024
_EXAMPLES = """examples:
  rlvr eval --model smollm2-135m --data gsm8k-100 --n 4 --k 1,2,4 --out eval/base.json
  rlvr eval --model runs/grpo/checkpoint-200 --data gsm8k-100,rg:chain_sum:size=200 \\
      --n 16 --greedy --out eval/step200.json
  rlvr eval --model Qwen/Qwen2.5-Math-1.5B --data math-500,aime24,amc --n 32 --max_completion_length 3072 \\
      --out eval/qwen.json
  rlvr eval --model runs/grpo --data math-500:path=/data/math500.parquet --out eval/latest.json

--model: an alias (smollm2-135m, tiny-random), a model folder, a run's checkpoint folder
(RUN/checkpoint-N), a run folder (its final model, else its latest checkpoint) or a Hub id.
--data: comma-separated specs: gsm8k-100, rg:NAME[:key=value...], a .jsonl/.json/.parquet file, a
Hub id owner/name[:split=...][:config=...], or a benchmark name (math-500, aime24, aime25, amc,
minerva, olympiadbench, gsm8k, gpqa-diamond; BENCHMARK:path=FILE for a local copy).
Per-problem results go to OUT.problems.jsonl; rerunning the same command resumes from it."""


def _from_config(section: type, name: str, **overrides) -> dict:
    """``default`` and ``help`` of an option that stands for config field ``name``, so that each
    default (and what it means) is written once, on the field; ``overrides`` replace either."""
    spec = next(f for f in dataclasses.fields(section) if f.name == name)
    default = overrides.pop("default", spec.default)
    text = overrides.pop("help", spec.metadata["help"])
    return {"default": default, "help": text if default is None else f"{text} (default {default})", **overrides}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="alias, model/checkpoint/run folder, or Hub id")
    parser.add_argument("--data", required=True, help="dataset spec(s), comma-separated")
    parser.add_argument("--out", required=True, help="summary JSON file (per-problem: OUT.problems.jsonl)")
    parser.add_argument("--n", type=int, default=DEFAULT_N, help=f"samples per problem (default {DEFAULT_N})")
    parser.add_argument("--k", help="comma-separated k of pass@k, each <= n (default 1,2,4,... up to n)")
    parser.add_argument("--temperature", type=float, **_from_config(EvalConfig, "eval_temperature"))
    parser.add_argument("--top_p", "--top-p", type=float, **_from_config(EvalConfig, "eval_top_p"))
    parser.add_argument("--max_completion_length", "--max-completion-length", type=int,
                        default=DEFAULT_MAX_COMPLETION_LENGTH,
                        help=f"max new tokens per response (default {DEFAULT_MAX_COMPLETION_LENGTH})")
    parser.add_argument("--greedy", action="store_true", help="also report greedy (temperature 0) accuracy")
    parser.add_argument("--diversity", action="store_true",
                        help="per-problem response diversity (needs: pip install 'rlvr[embed]')")
    parser.add_argument("--limit", type=int, **_from_config(EvalConfig, "eval_limit"))
    parser.add_argument("--log-samples", "--log_samples", dest="log_samples", action="store_true",
                        help="also write every response, its extracted answer and verdict to "
                        "<out>.samples.jsonl (to read what a score is made of)")
    parser.add_argument("--seed", type=int, **_from_config(RunConfig, "seed", help="sampling seed"))
    parser.add_argument("--dtype", **_from_config(ModelConfig, "dtype"))
    parser.add_argument("--device", **_from_config(ModelConfig, "device"))
    parser.add_argument("--batch-size", "--batch_size", type=int, default=64,
                        help="sequences per generate call (memory only; results do not depend on it)")
    parser.add_argument("--instruction", **_from_config(
        DataConfig, "instruction", help="text appended to each question, as in training"))
    parser.add_argument("--no-instruction", action="store_true", help="append no instruction")
    parser.add_argument("--system-prompt", "--system_prompt", **_from_config(DataConfig, "system_prompt"))
    parser.add_argument("--chat-template-kwargs", "--chat_template_kwargs", type=_mapping,
                        **_from_config(DataConfig, "chat_template_kwargs", help="extra chat-template variables "
                                       "as in training, YAML or JSON, e.g. '{enable_thinking: false}'"))
    parser.add_argument("--answer-extraction", "--answer_extraction", choices=EXTRACTION_MODES,
                        **_from_config(RewardConfig, "answer_extraction", default=DEFAULT_EXTRACTION))
    parser.add_argument("--code-sandbox", "--code_sandbox", choices=SANDBOX_MODES,
                        **_from_config(RewardConfig, "code_sandbox"))
    parser.add_argument("--tools", choices=["python"], default=None,
                        help="python: the model may run Python while it answers, in the code sandbox (as `rlvr train "
                             "tools=python`; docs/training.md, 'Tools')")
    parser.add_argument("--max-tool-calling-iterations", "--max_tool_calling_iterations", type=int, default=None,
                        help="with --tools: rounds of tool calls per response at most (default: no limit)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _mapping(text: str) -> dict:
    """``--chat-template-kwargs`` text (YAML or JSON) as a dict."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a mapping; write e.g. '{{enable_thinking: false}}'")
    return value


def add_eval_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``eval`` command to an ``add_subparsers()`` object; returns its parser."""
    parser = subparsers.add_parser(
        "eval",
        help="pass@k of a model on benchmarks or any dataset",
        description="Sample n responses per problem, verify each against the gold answer and report the "
        "unbiased pass@k per dataset (and greedy accuracy), with the training prompt format.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    return parser


def _ks(text: str | None, n: int) -> list[int]:
    if text is None:
        ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
        return ks + ([n] if ks[-1] != n else [])
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--k {text!r} is not a comma-separated list of integers; write e.g. --k 1,2,4") from None
    too_big = [k for k in ks if k > n]
    if too_big:
        raise ValueError(f"--k {too_big[0]} is larger than --n {n}: pass@k needs at least k samples per "
                         f"problem; raise --n to {max(too_big)} or drop those k")
    return ks


def resolve_model_path(name: str) -> str:
    """A model folder (checkpoint-N, a finished run's output_dir) → itself; a run folder without a final model
    → its latest checkpoint; else `name`."""
    path = Path(name).expanduser()
    if not path.is_dir() or _is_model(path):
        return name
    models = [folder for folder in list_checkpoints(path) if _is_model(folder)]
    if models:
        print(f"rlvr eval: using the latest checkpoint {models[-1]}", file=sys.stderr)
        return str(models[-1])
    return name  # load_policy explains what the folder lacks


def _is_model(folder: Path) -> bool:
    return (folder / "config.json").exists() or (folder / "adapter_config.json").exists()  # a LoRA adapter loads too


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {name} but torch sees no CUDA device; use --device cpu")
    return torch.device(name)


class _Stopped(KeyboardInterrupt):
    """The first SIGINT/SIGTERM, raised where the main thread is. A KeyboardInterrupt (a BaseException),
    so that no ``except Exception`` on the way up swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals():
    """Within: the first SIGINT/SIGTERM raises _Stopped (clean-up runs), a second one exits at once.

    After a first signal the handler stays installed on leaving: the process is on its way out, and
    a second Ctrl-C during the interpreter's own exit (atexit, finalizers) must not print a traceback.
    Without a signal the previous handlers are put back.
    """
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return
    stopping = []

    def handler(signum, frame):
        if stopping:  # os.write, not print: this may interrupt a print of the main thread
            os.write(2, f"rlvr eval: {signal.Signals(signum).name} again: exiting at once\n".encode())
            os._exit(128 + signum)
        stopping.append(signum)
        raise _Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if not stopping:
            for sig, old in previous.items():
                signal.signal(sig, old)


def _stopped_message(signum: int, out: str) -> str:
    from rlvr.eval.problems_file import count_finished, problems_path

    path = problems_path(out)
    try:
        saved = count_finished(path)
    except ValueError as error:  # a damaged file: say so rather than a count
        return f"rlvr eval: stopped by {signal.Signals(signum).name}; {error}"
    if saved == 0:
        return (f"rlvr eval: stopped by {signal.Signals(signum).name} before any problem finished; nothing was "
                "saved (run the same command to start again)")
    problems = "1 finished problem is" if saved == 1 else f"{saved} finished problems are"
    return (f"rlvr eval: stopped by {signal.Signals(signum).name}; {problems} saved in {path}; "
            "run the same command again to continue from there")


def _one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def run_eval(args: argparse.Namespace) -> int:
    """Run ``rlvr eval`` (module docstring); returns the exit code."""
    with _stop_on_signals():
        try:
            _run(args)
        except ValueError as error:
            print(f"rlvr eval: error: {_one_line(error)}", file=sys.stderr)
            return 2
        except _Stopped as stopped:
            print(_stopped_message(stopped.signum, args.out), file=sys.stderr)
            return 128 + stopped.signum
    print(f"wrote {args.out}")
    return 0


def _run(args: argparse.Namespace) -> None:
    from rlvr.eval import EvalSettings, evaluate, load_eval_datasets
    from rlvr.eval.problems_file import problems_path, settings_mismatch
    from rlvr.eval.runner import check_out_path, dtype_name, result_settings
    from rlvr.models import load_policy
    from rlvr.models.loading import parse_dtype

    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    ks = _ks(args.k, args.n)
    check_out_path(args.out)  # before any work: a bad --out would otherwise fail only at the very end
    specs = [spec.strip() for spec in args.data.split(",") if spec.strip()]
    datasets = load_eval_datasets(specs, limit=args.limit)  # before the model: fail fast
    model_path = resolve_model_path(args.model)
    settings = EvalSettings(
        n=args.n, ks=ks, temperature=args.temperature, top_p=args.top_p,
        max_completion_length=args.max_completion_length, instruction=None if args.no_instruction else args.instruction,
        system_prompt=args.system_prompt, greedy=args.greedy, answer_extraction=args.answer_extraction, seed=args.seed,
        batch_size=args.batch_size, diversity=args.diversity, limit=args.limit, model_name=model_path,
        chat_template_kwargs=args.chat_template_kwargs, log_samples=args.log_samples, code_sandbox=args.code_sandbox,
        tools=args.tools, max_tool_calling_iterations=args.max_tool_calling_iterations)
    # The resume check again before the model loads (evaluate repeats it with what loading decides: the
    # dtype under "auto", raw strings for a tokenizer without a chat template).
    dtype = parse_dtype(args.dtype)
    header = result_settings(settings, dtype=dtype_name(dtype))
    undecided = ("raw_strings",) + (("dtype",) if dtype == "auto" else ())
    mismatch = settings_mismatch(problems_path(args.out), header, undecided=undecided)
    if mismatch:
        raise ValueError(mismatch)
    try:
        model, tokenizer = load_policy(model_path, dtype=args.dtype)
    except OSError as error:  # transformers' "not a model folder / no such Hub id"
        raise ValueError(f"cannot load --model {args.model}: {_one_line(error)}") from error
    model.to(_device(args.device))
    evaluate(model, tokenizer, datasets, settings, out_path=args.out, progress=not args.no_progress)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlvr.eval_cli ARGS``: the same as ``rlvr eval ARGS``."""
    parser = argparse.ArgumentParser(prog="rlvr eval", epilog=_EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    return run_eval(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
