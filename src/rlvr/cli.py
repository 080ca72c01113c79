"""Command line: ``rlvr train [--config FILE.yaml] [key=value | --key value ...]``. Thin: parsing and printing only.

Every subcommand takes its options both ways: ``key=value`` and ``--key value`` / ``--key=value``
(TRL's and transformers' form); ``rlvr train`` also takes a bare ``--flag`` for a boolean option.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import subprocess
import sys

import yaml

from rlvr import __version__, threads
from rlvr.config import SECTIONS, field_help, load_config
from rlvr.config.parsing import pairs_from_cli
from rlvr.config.presets import PRESET_HELP
from rlvr.eval_cli import add_eval_parser, run_eval
from rlvr.rephrase_cli import add_rephrase_parser, run_rephrase
from rlvr.report_cli import add_report_parser, run_report
from rlvr.run.supervise import become_supervised_child, report_finished, supervise, supervisor_pid
from rlvr.vllm_serve_cli import add_vllm_serve_parser, run_vllm_serve


def _train_help() -> str:
    lines = ["options (key=value, --key value or --key=value; a bare --flag sets a boolean; defaults shown;",
             "`preset` and `algo` change some of them; TRL's names are taken too, see docs/training.md 'From TRL'):",
             f"\n    preset = 'rlvr'\n        {PRESET_HELP}"]
    current = None
    for section, name, default, text in field_help():
        if section != current:
            lines.append(f"\n  [{section}]")
            current = section
        lines.append(f"    {name} = {default!r}\n        {text}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="RL from verifiable rewards: GRPO, DaGRPO, TA-GRPO.")
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train a policy",
        description="Train a policy. Examples:\n  rlvr train\n"
        "  rlvr train model=tiny-random data=rg:basic_arithmetic max_steps=3 output_dir=runs/smoke\n"
        "  rlvr train --model tiny-random --max_steps 3 --bf16\n"
        "  rlvr train --config my.yaml beta=0.04          # rlvr's or TRL's GRPOConfig YAML",
        epilog=_train_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sft = sub.add_parser(
        "sft",
        help="supervised fine-tuning on expert solutions (the SFT baseline)",
        description="Supervised fine-tuning on the data's expert solutions (`solution` column, or "
        "generated worked solutions for reasoning-gym arithmetic), with the same options and run "
        "directory as `rlvr train`. Example:\n  rlvr sft data=gsm8k-100 max_steps=50",
        epilog=_train_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_rephrase_parser(sub)
    add_report_parser(sub)
    add_eval_parser(sub)
    add_vllm_serve_parser(sub)
    for command in (train, sft):
        command.add_argument("--config", help="YAML file of options (flat, or nested by section: "
                             + ", ".join(SECTIONS) + ")")
        command.add_argument("--dry-run", action="store_true", help="print the resolved config as YAML and exit")
        command.add_argument("overrides", nargs="*", metavar="key=value", help="options (or --key value); see below")
    return parser


def split_train_args(tokens: list[str]) -> argparse.Namespace:
    """``rlvr train|sft`` arguments: ``--config``, ``--dry-run`` and the options (``key=value`` pairs).

    Not argparse: options come as ``--key value`` too, for any of the config's keys.
    """
    config, dry_run, rest, i = None, False, [], 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in ("--dry-run", "--dry_run"):
            dry_run = True
        elif token == "--config":
            if i >= len(tokens):
                raise ValueError("--config needs a YAML file (e.g. --config my.yaml)")
            config, i = tokens[i], i + 1
        elif token.startswith("--config="):
            config = token.split("=", 1)[1]
        else:
            rest.append(token)
    return argparse.Namespace(config=config, dry_run=dry_run, overrides=pairs_from_cli(rest))


def flags_from_pairs(parser: argparse.ArgumentParser, tokens: list[str]) -> list[str]:
    """``key=value`` as ``--key value`` for the options ``parser`` has (``rlvr eval model=M n=8``)."""
    options = {s: a for a in parser._actions for s in a.option_strings}
    out = []
    for token in tokens:
        key, sep, value = token.partition("=")
        flag = next((f for f in (f"--{key}", f"--{key.replace('_', '-')}", f"--{key.replace('-', '_')}")
                     if f in options), None)
        if token.startswith("-") or not sep or flag is None:
            out.append(token)
        elif options[flag].nargs == 0:  # a store_true flag: greedy=true
            if value.lower() not in ("true", "false", "yes", "no", "1", "0"):
                raise ValueError(f"{key}={value!r}: {flag} is a switch; use {key}=true or {key}=false")
            out.extend([flag] if value.lower() in ("true", "yes", "1") else [])
        else:
            out.extend([flag, value])
    return out


_OS_ERROR_FIXES = {
    errno.ENOSPC: "free space, lower save_total_limit, or put output_dir on a larger disk",
    errno.EDQUOT: "free space within your quota, lower save_total_limit, or put output_dir elsewhere",
    errno.EFBIG: "a file grew past the file-size limit: raise it (`ulimit -f unlimited`) or choose another output_dir",
    errno.EIO: "the disk failed to write: check it (`dmesg`) or choose an output_dir on another disk",
    errno.EROFS: "the file system is read-only: choose an output_dir on a writable disk",
    errno.EACCES: "choose an output_dir you may write to, or fix its permissions",
    errno.EPERM: "choose an output_dir you may write to, or fix its permissions",
    errno.ENOTDIR: "a part of that path is a file: choose another output_dir",
    errno.EEXIST: "a file is in the way: choose another output_dir",
}


def os_error_line(error: OSError) -> str:
    """An OSError in one line, with the fix for the errors a run's environment causes (unless it names one)."""
    text = " ".join(str(error).split())
    fix = _OS_ERROR_FIXES.get(error.errno)
    return text if fix is None or ";" in (error.strerror or "") else f"{text}; {fix}"


# log_level (TRL's names): passive keeps rlvr's own level, info
LOG_LEVELS = {"passive": logging.INFO, "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR, "critical": logging.CRITICAL}


def dry_run(cfg, command: str) -> int:
    """``--dry-run``: the resolved config as YAML, then what the run resolves before its model loads (data,
    reward functions and their columns, the batch and the run's length), or the error it would stop with."""
    from rlvr.config.defaults_line import defaults_line
    from rlvr.train.dry_run import dry_run_report

    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
    try:
        lines = dry_run_report(cfg)
    except (ValueError, TypeError) as error:
        print(f"rlvr {command}: {error}", file=sys.stderr)
        return 2
    for line in [defaults_line(cfg), *lines]:
        if line:
            print(f"# {line}", file=sys.stderr)
    return 0


def launch_torchrun(nproc: int, argv: list[str]) -> int:
    """``rlvr train nproc=N ...``: run the same command under torchrun with N processes on this machine."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "rlvr.cli", *argv]
    print(f"rlvr: launching {nproc} processes: {' '.join(command[1:])}", file=sys.stderr)
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """The program (``argv`` None: ``sys.argv``); ``rlvr train``/``sft`` started so train in a child process
    that this one watches (``rlvr/run/supervise.py``: a run that did not finish is never reported as done)."""
    if argv is None and sys.argv[1:2] in (["train"], ["sft"]) and "WORLD_SIZE" not in os.environ:
        if not become_supervised_child():
            return supervise(sys.argv[1:], sys.argv[1], env=threads.environ_as_given())
        try:
            return run_command(sys.argv[1:])
        finally:
            report_finished()
    return run_command(sys.argv[1:] if argv is None else list(argv))


def run_command(argv: list[str]) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        args = parse_args(argv)
    except ValueError as error:
        print(f"rlvr {argv[0]}: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    commands = {"rephrase": run_rephrase, "report": run_report, "eval": run_eval, "vllm-serve": run_vllm_serve}
    if args.command in commands:
        return commands[args.command](args)
    if args.command in ("train", "sft"):
        return run_train(args, argv)
    return 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line as a namespace: ``train``/``sft`` take key=value pairs, the others flags or pairs.
    ValueError for pairs that do not parse."""
    parser = build_parser()
    command = argv[0] if argv else None
    if command in ("train", "sft") and not {"-h", "--help"} & set(argv[1:]):
        args = split_train_args(argv[1:])
        args.command = command
        return args
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if command in subparsers.choices:
        argv = [command, *flags_from_pairs(subparsers.choices[command], argv[1:])]
    return parser.parse_args(argv)


def run_train(args: argparse.Namespace, argv: list[str]) -> int:
    """``rlvr train`` / ``rlvr sft``: the config, then a dry run, torchrun's launch, or the run itself."""
    overrides = list(args.overrides)
    if args.command == "sft":
        if any(pair.split("=", 1)[0] == "algo" and pair != "algo=sft" for pair in overrides):
            print("rlvr sft: algo is always sft here; use `rlvr train algo=...` for RL", file=sys.stderr)
            return 2
        overrides.append("algo=sft")
    try:
        cfg = load_config(args.config, overrides)
    except (ValueError, TypeError) as error:
        print(f"rlvr {args.command}: {error}", file=sys.stderr)
        return 2
    logging.getLogger("rlvr").setLevel(LOG_LEVELS[cfg.run.log_level])
    if args.dry_run:
        return dry_run(cfg, args.command)
    if cfg.run.nproc > 1 and "WORLD_SIZE" not in os.environ:
        return launch_torchrun(cfg.run.nproc, argv)
    as_program = supervisor_pid() is not None or "WORLD_SIZE" in os.environ  # not main(argv) from Python
    # the trainer stays referenced until the exit below
    code, trainer = train_exit_code(cfg, args.command, as_program=as_program)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A torchrun worker leaves without running torch's C++ destructors: after the process
        # group is destroyed, freeing the DDP/gloo objects can block for ever in a thread join
        # on one rank (seen: rank 1 in std::thread::join after rank 0 had exited, so torchrun
        # never returned). train() has written and closed everything by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    del trainer
    return code


def train_exit_code(cfg, command: str, *, as_program: bool = False) -> tuple[int, object]:
    """Train; the exit code, with one line on stderr for what stopped the run (0: it finished), and the
    trainer (None if it was not built), for the caller to hold until the process exits. ``as_program``: a
    signal after the run ends the process at once (``StopAtOnceOnSignal``)."""
    from transformers.utils import logging as hf_logging

    from rlvr.run.stopping import StopAtOnceOnSignal, TrainingInterrupted, stopped_at_once_advice
    from rlvr.train.trainer import Trainer, TrainingStopped  # heavy imports only when training

    hf_logging.disable_progress_bar()  # weight loading/saving bars would break our own bar
    trainer = None
    try:
        with StopAtOnceOnSignal(then_leave=as_program):  # SIGTERM/SIGHUP while loading: a line and 128 + the signal
            trainer = Trainer(cfg)
            trainer.train()
        return 0, trainer
    except ValueError as error:
        print(f"rlvr {command}: {error}", file=sys.stderr)
        return 2, trainer
    except OSError as error:  # a full disk, a read-only or unwritable output_dir
        print(f"rlvr {command}: {os_error_line(error)}", file=sys.stderr)
        return 2, trainer
    except TrainingStopped as error:
        print(f"rlvr {command}: stopped: {error}", file=sys.stderr)
        return 3, trainer
    except TrainingInterrupted as error:  # Ctrl-C / SIGTERM / SIGHUP: the step finished and was saved
        print(f"rlvr {command}: interrupted by {error}", file=sys.stderr)
        return error.exit_code, trainer
    except KeyboardInterrupt as error:  # a signal while loading, or a second one: nothing more is saved
        name, code = (error.args[0], error.exit_code) if hasattr(error, "exit_code") else ("SIGINT", 130)
        output_dir = getattr(trainer, "output_dir", None)
        print(f"rlvr {command}: interrupted by {name}; {stopped_at_once_advice(output_dir)}", file=sys.stderr)
        return code, trainer

if __name__ == "__main__":
    sys.exit(main())
