"""docs/from_trl.md's table of every GRPOConfig key is the one the tables generate (it cannot drift)."""

from pathlib import Path

import pytest

from rlvr.config.trl_table import installed_grpo_config_defaults, keys_table, treatment

pytest.importorskip("trl")
DOC = Path(__file__).resolve().parents[2] / "docs" / "from_trl.md"
START = "<!-- generated: python -m rlvr.config.trl_table; tests/config/test_trl_table.py keeps it equal -->\n"


def test_the_docs_table_is_the_generated_one():
    text = DOC.read_text(encoding="utf-8")
    assert START in text, "the generated block's marker is missing"
    block = text.split(START, 1)[1].split("\n<!-- end generated -->", 1)[0]
    assert block == keys_table(installed_grpo_config_defaults()), "run: python -m rlvr.config.trl_table"


def test_no_key_of_the_installed_grpo_config_is_unknown():
    assert [key for key in installed_grpo_config_defaults() if treatment(key) == "unknown option"] == []
    assert treatment("no_such_key") == "unknown option"
