"""Import direction: core ← {rewards, data, rollout, eval, models} ← config ← {parallel ← run} ← train ← cli.

Every module under src/rlvr is parsed with ``ast`` (nothing is imported), so lazy imports inside
functions count too. Rules:

- ``core`` imports only the standard library, ``torch`` (never ``torch.distributed``) and
  ``rlvr.core``; it makes no ``.item()`` calls (no host syncs in the math).
- ``rewards``, ``data``, ``eval``, ``models`` may import ``core``; ``rollout`` also ``models`` and
  ``data``; ``config`` (the experiment dataclasses) core and those five; ``parallel`` (processes and
  precision) nothing of rlvr; ``run`` (the run's life) ``config`` and ``parallel``; ``train`` any of
  those; ``report`` ``core`` and ``eval``; ``eval_cli`` also ``run`` (the checkpoint layout); ``cli``
  anything.
- ``rlvr/__init__.py`` may import only ``core`` (importing ``rlvr.core`` runs it first) and
  ``threads`` (the OpenMP set-up, which imports nothing of rlvr nor torch: it must run before torch
  is loaded); ``train`` and ``cli`` may import ``threads`` too.

A new top-level package or module must be added to ``ALLOWED`` below.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rlvr"

LEVEL_ONE = {"rewards", "data", "rollout", "eval", "models"}
ALLOWED: dict[str, set[str]] = {
    "__init__": {"core", "threads", "trl_api"},  # trl_api: imported on first use (rlvr.GRPOTrainer)
    "threads": set(),
    "dependencies": set(),  # MissingDependency: an optional package an option needs
    "core": {"core"},
    "rewards": {"dependencies", "core", "rewards", "models"},
    "data": {"core", "data"},
    "eval": {"dependencies", "core", "eval", "models", "rollout", "rewards", "data"},
    "models": {"dependencies", "core", "models"},
    "rollout": {"dependencies", "core", "rollout", "models", "data"},
    "config": {"core", "config"} | LEVEL_ONE,
    "parallel": {"parallel"},
    "run": {"dependencies", "core", "config", "run", "parallel"},
    "train": {"dependencies", "core", "config", "train", "run", "parallel", "threads"} | LEVEL_ONE,
    "report": {"core", "report", "eval"},
    "trl_api": {"core", "config", "data", "run", "train", "trl_api"},  # TRL's Python API on the trainer
    "rephrase_cli": {"core", "rephrase_cli"} | LEVEL_ONE,
    "eval_cli": {"dependencies", "core", "eval_cli", "config", "run"} | LEVEL_ONE,
    "report_cli": {"core", "report", "report_cli", "eval"},
    "vllm_serve_cli": {"rollout", "models", "vllm_serve_cli"},  # the command; the server is rollout/vllm_server.py
    "cli": {"dependencies", "core", "config", "train", "run", "report", "cli", "report_cli", "rephrase_cli", "eval_cli",
            "vllm_serve_cli", "threads"}
           | LEVEL_ONE,
}
CORE_THIRD_PARTY = {"torch"}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)  # ["rlvr", "core", "x"]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str, str]]:
    """(line, absolute imported name, source text) for every import in a module."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            text = f"from {'.' * node.level}{node.module or ''} import " + ", ".join(
                a.name for a in node.names
            )
            # `from rlvr import train` / `from torch import distributed` name submodules.
            for alias in node.names:
                found.append((node.lineno, f"{target}.{alias.name}", text))
    return found


def _rlvr_package(name: str, root: Path) -> str | None:
    """'rlvr.train.loop' → 'train'; 'rlvr' and 'rlvr.__version__' → '__init__'; others → None."""
    parts = name.split(".")
    if parts[0] != "rlvr":
        return None
    if len(parts) == 1:
        return "__init__"
    sub = parts[1]
    is_module = sub in ALLOWED or (root / sub).is_dir() or (root / f"{sub}.py").is_file()
    return sub if is_module else "__init__"  # `from rlvr import __version__`: an attribute


def find_violations(root: Path = SRC) -> list[str]:
    """Every import (and core `.item()` call) that breaks the direction, as 'file:line: what'."""
    violations = []
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        module = _module_name(path, root)
        layer = _rlvr_package(module, root)
        where = f"{rel}"
        if layer not in ALLOWED:
            violations.append(f"{where}: top-level '{layer}' is not in ALLOWED; add its layer")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        seen = set()
        for line, name, text in _imports(tree, module, path.name == "__init__.py"):
            target = _rlvr_package(name, root)
            if target is not None:
                # The root package is imported first by any import of rlvr.*: always allowed.
                bad = target not in (layer, "__init__") and target not in ALLOWED[layer]
                if bad and (line, target) not in seen:
                    seen.add((line, target))
                    violations.append(f"{where}:{line}: {layer} must not import {target}: {text}")
                continue
            if layer != "core":
                continue
            top = name.split(".")[0]
            if name.startswith("torch.distributed"):
                violations.append(f"{where}:{line}: core must not use torch.distributed: {text}")
            elif top not in stdlib and top not in CORE_THIRD_PARTY:
                violations.append(f"{where}:{line}: core imports only torch and stdlib: {text}")
        if layer == "core":
            violations.extend(_core_body_violations(tree, where))
    return violations


def _core_body_violations(tree: ast.AST, where: str) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "item"
        ):
            out.append(f"{where}:{node.lineno}: core must not call .item() (a host sync)")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "distributed"
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
        ):
            out.append(f"{where}:{node.lineno}: core must not use torch.distributed")
    return out


def test_import_direction_of_the_source_tree():
    assert SRC.is_dir(), SRC
    assert any(SRC.glob("core/*.py"))
    violations = find_violations(SRC)
    assert not violations, "import direction violated:\n" + "\n".join(violations)


# --- the checker itself catches violations (on a throwaway tree, never on src/) --------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "rlvr"
    for rel in ["__init__.py", "core/__init__.py", *files]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(files.get(rel, ""), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("core/x.py", "from rlvr.train import loop\n", "core must not import train"),
        ("core/x.py", "from ..rewards import math\n", "core must not import rewards"),
        ("core/x.py", "def f():\n    import rlvr.cli\n", "core must not import cli"),
        ("core/x.py", "import numpy as np\n", "core imports only torch and stdlib"),
        ("core/x.py", "import torch.distributed as dist\n", "torch.distributed"),
        ("core/x.py", "from torch import distributed\n", "torch.distributed"),
        ("core/x.py", "import torch\nr = torch.distributed.get_rank()\n", "torch.distributed"),
        ("core/x.py", "def f(t):\n    return t.sum().item()\n", ".item()"),
        ("rewards/x.py", "from rlvr.rollout import engine\n", "rewards must not import rollout"),
        ("data/x.py", "from rlvr import models\n", "data must not import models"),
        ("eval/x.py", "from rlvr.train.loop import step\n", "eval must not import train"),
        ("rollout/x.py", "from rlvr.rewards import math\n", "rollout must not import rewards"),
        ("rollout/sub/x.py", "from ...train import loop\n", "rollout must not import train"),
        ("train/x.py", "from rlvr.cli import main\n", "train must not import cli"),
        ("train/x.py", "from rlvr.report import plots\n", "train must not import report"),
        ("report/x.py", "from rlvr.rollout import engine\n", "report must not import rollout"),
        ("__init__.py", "from rlvr.train import Trainer\n", "__init__ must not import train"),
        ("config.py", "from rlvr.train import loop\n", "config must not import train"),
        ("data/x.py", "from rlvr.config import ExperimentConfig\n", "data must not import config"),
        ("core/x.py", "from rlvr.core import a\nfrom rlvr.data import b, c\n", "import data"),
        ("settings.py", "", "not in ALLOWED"),
    ],
)
def test_checker_reports_bad_imports(tmp_path, rel, source, expected):
    root = _tree(tmp_path, {rel: source})
    violations = find_violations(root)
    assert len(violations) == 1, violations
    assert expected in violations[0]
    assert str(Path("rlvr") / rel) in violations[0]


def test_checker_accepts_allowed_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "core/x.py": "from __future__ import annotations\nimport math\nimport torch\n"
            "from collections.abc import Callable\nfrom .y import z\nfrom rlvr.core import y\n",
            "core/y.py": "import torch.nn.functional as F\nz = 1\n",
            "rewards/x.py": "import re\nfrom rlvr.core.advantages import grpo_advantages\n",
            "rollout/x.py": "from rlvr.models import load\nfrom ..data import rows\nimport vllm\n",
            "train/x.py": "from rlvr import core, rewards, data, rollout, eval, models\n",
            "report/x.py": "from rlvr.eval import passk\n",
            "config.py": "import yaml\nfrom rlvr.core.losses import resolve_aggregation\n"
            "from rlvr.data.prompts import DEFAULT_INSTRUCTION\n",
            "train/y.py": "from rlvr.config import ExperimentConfig\n",
            "cli.py": "import rlvr\nfrom rlvr import __version__\nfrom rlvr.train import loop\n"
            "from rlvr.report import plots\nfrom rlvr.config import load_config\n",
        },
    )
    assert find_violations(root) == []


# ---------------------------------------------------------------------------------------------
# No import circles: module A imports B (at module level or lazily inside a function) and B imports A,
# directly or through others. A circle means neither module can be read, tested or moved without the
# other; the direction above is between packages, this is between the modules inside them.


def _module_files(root: Path) -> dict[str, Path]:
    return {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module of ``target`` (``rlvr.a.b`` or ``rlvr.a.b.name``) among ``modules``, else None."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines under ``if TYPE_CHECKING:`` (annotations only: no import at run time)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """module -> the rlvr modules it imports (``from rlvr.x import y`` counts y when it is a module, else x)."""
    modules, graph = _module_files(root), {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        edges = set()
        for line, target, text in _imports(tree, name, path.name == "__init__.py"):
            if line in skip or not (target == root.name or target.startswith(f"{root.name}.")):
                continue
            imported = [f"{target}.{n.strip()}" for n in text.split(" import ", 1)[1].split(",")] \
                if text.startswith("from ") else []
            for candidate in [t for t in imported if t in modules] or [target]:
                resolved = _resolve(candidate, modules)
                if resolved is not None and resolved != name:
                    edges.add(resolved)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circles_in_the_source_tree():
    cycles = import_cycles(import_graph())
    assert not cycles, f"modules that import each other (directly or through others): {cycles}"


def test_the_circle_finder_finds_lazy_and_indirect_circles(tmp_path):
    root = _tree(tmp_path, {
        "a.py": "from rlvr.b import f\n",
        "b.py": "def f():\n    from rlvr import c\n",  # lazy, inside a function: still a circle
        "c.py": "import rlvr.a\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlvr.e import E\n",
        "e.py": "from rlvr.d import x\n",  # d -> e only for annotations: no circle
    })
    assert import_cycles(import_graph(root)) == [["rlvr.a", "rlvr.b", "rlvr.c"]]


# ---------------------------------------------------------------------------------------------
# Rooms inside a package with a narrower rule (docs/design/architecture.md, "The rooms"):
# module prefix -> (what of rlvr it may import, which third-party packages)
SUBROOMS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    # the code sandbox: runs generated programs in worker processes it starts; a worker must load nothing but
    # the standard library (no torch, no reward code): the sandbox imports only itself (the worker's own
    # sibling files by their top-level names: it runs by path, outside rlvr)
    "rlvr.rewards.sandbox": (("rlvr.rewards.sandbox",),
                             frozenset({"worker_kernel", "worker_program", "worker_languages"})),
}
# rooms that only the listed packages may import (besides themselves)
IMPORTED_ONLY_BY = {
    "trl_api": {"__init__"},  # TRL's Python API: `from rlvr import GRPOTrainer`, on first use
}


def find_subroom_violations(root: Path = SRC) -> list[str]:
    """Imports that break a room's own rule (``SUBROOMS``, ``IMPORTED_ONLY_BY``), as 'file:line: what'."""
    stdlib, out = set(sys.stdlib_module_names) | {"__future__"}, []
    for path in sorted(root.rglob("*.py")):
        module, where = _module_name(path, root), path.relative_to(root.parent)
        layer = _rlvr_package(module, root)
        rule = next((r for prefix, r in SUBROOMS.items() if module == prefix or module.startswith(prefix + ".")), None)
        for line, name, text in _imports(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py"):
            target = _rlvr_package(name, root)
            if target in IMPORTED_ONLY_BY and layer != target and layer not in IMPORTED_ONLY_BY[target]:
                out.append(f"{where}:{line}: only {sorted(IMPORTED_ONLY_BY[target])} may import {target}: {text}")
            if rule is None:
                continue
            own, third_party = rule
            if name == root.name or name.startswith(root.name + "."):
                if not any(name == p or name.startswith(p + ".") for p in own):
                    out.append(f"{where}:{line}: {module} imports only {list(own)} of rlvr: {text}")
            elif name.split(".")[0] not in stdlib and name.split(".")[0] not in third_party:
                out.append(f"{where}:{line}: {module} imports only the standard library: {text}")
    return out


def test_the_rooms_keep_their_own_rules():
    assert find_subroom_violations() == []


def test_the_room_checker_reports_what_breaks_a_rule(tmp_path):
    root = _tree(tmp_path, {
        "rewards/__init__.py": "",
        "rewards/sandbox/__init__.py": "from rlvr.rewards.sandbox.pool import run\nimport json, subprocess\n",
        "rewards/sandbox/pool.py": "import torch\nfrom rlvr.rewards import math_rewards\nfrom rlvr.core import x\n",
        "rewards/code.py": "from rlvr.rewards.sandbox import run\n",  # the rewards use the sandbox: allowed
        "trl_api/__init__.py": "",
        "train/x.py": "from rlvr.trl_api import GRPOTrainer\n",
        "__init__.py": "def __getattr__(name):\n    from rlvr.trl_api import GRPOTrainer\n",
    })
    found = find_subroom_violations(root)
    assert [line.split(": ", 1)[1] for line in found] == [
        "rlvr.rewards.sandbox.pool imports only the standard library: import torch",
        "rlvr.rewards.sandbox.pool imports only ['rlvr.rewards.sandbox'] of rlvr: from rlvr.rewards import math_rewards",
        "rlvr.rewards.sandbox.pool imports only ['rlvr.rewards.sandbox'] of rlvr: from rlvr.core import x",
        "only ['__init__'] may import trl_api: from rlvr.trl_api import GRPOTrainer",
    ], found
