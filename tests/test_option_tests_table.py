"""docs/design/option_tests.md maps every DaGRPO, TA-GRPO and reward option, and the TRL API's arguments and
evaluation keys, to the tests that fail when the option is ignored: no option without a row, no row for an option
that is gone, and every cited test exists (found by ``ast`` in the file cited)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

from rlvr.config.experiment import FIELD_SECTION, SECTIONS

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "design" / "option_tests.md"
TABLED_SECTIONS = ("dagrpo", "tagrpo", "reward")
ALSO = {"multi_objective_aggregation"}  # the reward functions' aggregation, an algorithm-section option
ROW = re.compile(r"^\| `(?P<option>[^`]+)` \| (?P<section>[\w]+) \| (?P<tests>[^|]*) \| (?P<pins>[^|]*) \|$")
CITED = re.compile(r"`(?P<file>[\w/]+\.py)::(?P<name>\w+)`")


def rows() -> dict[str, dict]:
    found: dict[str, dict] = {}
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match is None or match["option"] == "option":
            continue
        assert match["option"] not in found, f"two rows for {match['option']}"
        found[match["option"]] = {"section": match["section"], "pins": match["pins"].strip(),
                                  "tests": [(m["file"], m["name"]) for m in CITED.finditer(match["tests"])]}
    return found


def trl_api_options() -> dict[str, str]:
    """The TRL API's own surface: GRPOTrainer's arguments, its methods' arguments, the GRPOConfig keys it reads."""
    from rlvr.trl_api.evaluation import EVAL_DEFAULTS
    from rlvr.trl_api.trainer import GRPOTrainer

    options = {}
    for method in ("__init__", "train", "evaluate", "save_model", "add_callback"):
        label = "GRPOTrainer" if method == "__init__" else method
        for name, parameter in inspect.signature(getattr(GRPOTrainer, method)).parameters.items():
            if name != "self" and not name.startswith("_") and parameter.kind is not parameter.VAR_KEYWORD:
                options[f"{label}({name})"] = "trl_api"
    return options | dict.fromkeys(EVAL_DEFAULTS, "GRPOConfig")


def required() -> dict[str, str]:
    config = {f.name: section for section in TABLED_SECTIONS for f in dataclasses.fields(SECTIONS[section])}
    return config | {name: FIELD_SECTION[name] for name in ALSO} | trl_api_options()


def test_every_option_has_a_row_and_every_row_an_option():
    table, wanted = rows(), required()
    assert sorted(set(wanted) - set(table)) == [], "options with no row in docs/design/option_tests.md"
    assert sorted(set(table) - set(wanted)) == [], "rows for options that no longer exist"
    wrong = {name: (row["section"], wanted[name]) for name, row in table.items() if row["section"] != wanted[name]}
    assert wrong == {}, "rows whose section is not the option's (table, code)"
    assert [name for name, row in table.items() if not row["tests"] or not row["pins"]] == []


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            functions += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {node.name for node in functions if node.name.startswith("test")}


def test_every_cited_test_exists():
    cited = {(file, name) for row in rows().values() for file, name in row["tests"]}
    cited |= {(m["file"], m["name"]) for m in CITED.finditer(PAGE.read_text(encoding="utf-8"))}  # prose too
    names = {file: _test_names(REPO / "tests" / file) for file, _ in cited if (REPO / "tests" / file).is_file()}
    missing = sorted(f"tests/{file}::{name}" for file, name in cited if name not in names.get(file, ()))
    assert missing == [], "cited in docs/design/option_tests.md but not found"
