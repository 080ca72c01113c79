"""Where each config option is read, found by parsing the source (nothing is imported but the config).

    python tools/option_readers.py            # the table docs/design/architecture.md holds
    python tools/option_readers.py --write    # put it in the page, between its markers
    python tools/option_readers.py --check    # exit 1 if the page's table differs

An option is read where a module takes an attribute of a config section: ``cfg.<section>.<option>``
(also ``self.cfg...``), or ``x.<option>`` where ``x`` was bound to a section (``a = cfg.algorithm``,
``a, d = cfg.algorithm, cfg.dagrpo``) or is a parameter annotated with a section's class
(``def build_optimizer(params, o: OptimConfig)``). ``rlvr.config`` itself (validation, presets) is
not counted. tests/test_option_readers.py keeps the page's table equal to this one and each option
read in one module, or listed in ``SEVERAL`` with the reason.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "rlvr"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "design" / "architecture.md"
START, END = "<!-- option table: tools/option_readers.py -->\n", "<!-- end of option table -->\n"

# options read in more than one module, and why that is one decision each time
SEVERAL = {
    "algo": "the plan's step kind (RL or SFT); the run plan names the default run folder after it",
    "data": "the data spec: loaded at set-up; the other modules only name it in their messages",
    "nproc": "the CLI launches that many processes; the run plan checks it runs in as many; the dry run counts them",
    "parallelism": "the policy's wrapping (setup); the plan refuses an engine that keeps its own weights under FSDP",
    "preset": "the dialect (rlvr or trl): TRL's max_steps count (plan), TRL's prompt format and reward names (setup)",
    "report_to": "the trackers opened (the run plan); their packages checked before the model loads (setup, also in the dry run)",
    "rollout_engine": "the engine built with its options (setup); the plan reads the engine class's abilities (async "
                      "generation, the importance-sampling correction's default, FSDP)",
    "seed": "the run's seed: the plan's sampling seeds, set-up's rule rephrasings and model init, the run "
            "plan's torch seed and data order each take it as it is",
}
# options the config derives others from, read only inside rlvr.config
DERIVED = {
    "prompts_per_step": "`config/batch.py` (the step's batch shape)",
    "per_device_train_batch_size": "`config/batch.py` (the step's batch shape)",
    "gradient_accumulation_steps": "`config/batch.py` (the step's batch shape)",
    "steps_per_generation": "`config/batch.py` (the step's batch shape)",
    "loss_type": "`config/sections.py` (`aggregation`: TRL's and verl's names to one)",
    "policy_loss": "`config/sections.py` (`policy`: or the one TRL's loss_type cispo / sapo / vespo names)",
    # RolloutConfig.sampling_settings: the engine's sampling, generation_kwargs over the options
    **dict.fromkeys(("top_p", "top_k", "min_p", "repetition_penalty", "generation_kwargs"),
                    "`config/sections.py` (`sampling_settings`: generation_kwargs over the options)"),
}


def sections() -> dict[str, tuple[str, str]]:
    """option -> (section attribute, section class name)."""
    sys.path.insert(0, str(SRC.parent))
    from rlvr.config import SECTIONS, ExperimentConfig

    cfg, out = ExperimentConfig(), {}
    for name in SECTIONS:
        section = getattr(cfg, name)
        for field in dataclasses.fields(section):
            out[field.name] = (name, type(section).__name__)
    return out


def _getattr_name(node: ast.AST) -> tuple[ast.AST, str] | None:
    """(object, name) of ``getattr(object, "name"[, default])``, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return node.args[0], node.args[1].value
    return None


def _is_cfg(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "cfg") or (isinstance(node, ast.Attribute) and node.attr == "cfg")


def _section_of(node: ast.AST, options: dict, bound: dict[str, str]) -> str | None:
    """The section an expression is: ``cfg.<section>``, ``self.cfg.<section>``, ``getattr(cfg, "<section>")``,
    or a name bound to one."""
    names = {section for section, _ in options.values()}
    if isinstance(node, ast.Attribute) and node.attr in names and _is_cfg(node.value):
        return node.attr
    read = _getattr_name(node)
    if read is not None and read[1] in names and _is_cfg(read[0]):
        return read[1]
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    return None


def _option_read(node: ast.AST, options: dict, bound: dict[str, str]) -> str | None:
    """The option ``node`` reads: ``<section>.<option>`` or ``getattr(<section>, "<option>")``, else None."""
    if isinstance(node, ast.Attribute) and node.attr in options:
        obj, name = node.value, node.attr
    elif (read := _getattr_name(node)) is not None and read[1] in options:
        obj, name = read
    else:
        return None
    return name if _section_of(obj, options, bound) == options[name][0] else None


def reads_in(tree: ast.AST, options: dict) -> set[str]:
    """The options a module's source reads, in any of its scopes."""
    found = set()
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        bound = _bindings(scope, options)
        found.update(name for node in ast.walk(scope) if (name := _option_read(node, options, bound)) is not None)
    return found


def _bindings(func: ast.AST, options: dict) -> dict[str, str]:
    """Names bound to a section inside ``func``: assignments and annotated parameters."""
    classes = {cls: section for section, cls in options.values()}
    bound: dict[str, str] = {}
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for arg in [*func.args.args, *func.args.kwonlyargs]:
            annotation = arg.annotation
            if annotation is not None:
                text = ast.unparse(annotation).split(".")[-1].split(" ")[0]
                if text in classes:
                    bound[arg.arg] = classes[text]
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            targets, values = node.targets[0], node.value
            pairs = (zip(targets.elts, values.elts) if isinstance(targets, ast.Tuple) and isinstance(values, ast.Tuple)
                     and len(targets.elts) == len(values.elts) else [(targets, values)])
            for target, value in pairs:
                section = _section_of(value, options, {})
                if isinstance(target, ast.Name) and section is not None:
                    bound[target.id] = section
    return bound


def readers() -> dict[str, set[str]]:
    """option -> the modules (paths under src/rlvr) that read it."""
    options, found = sections(), defaultdict(set)
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("config/"):
            continue
        for name in reads_in(ast.parse(path.read_text(encoding="utf-8")), options):
            found[name].add(rel)
    return found


def table() -> str:
    options, found = sections(), readers()
    rows = ["| option | section | read in |", "|---|---|---|"]
    for name in sorted(options, key=lambda n: (options[n][0], n)):
        where = ", ".join(f"`{m}`" for m in sorted(found.get(name, ()))) or DERIVED.get(name, "(validation only)")
        rows.append(f"| `{name}` | {options[name][0]} | {where} |")
    return "\n".join(rows) + "\n"


def page_table() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text[text.index(START) + len(START):text.index(END)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/design/architecture.md's table differs")
    parser.add_argument("--write", action="store_true", help="write the table into docs/design/architecture.md")
    args = parser.parse_args(argv)
    if args.check:
        return 0 if page_table() == table() else 1
    if args.write:
        text = PAGE.read_text(encoding="utf-8")
        start, end = text.index(START) + len(START), text.index(END)
        PAGE.write_text(text[:start] + table() + text[end:], encoding="utf-8")
        return 0
    print(table(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
