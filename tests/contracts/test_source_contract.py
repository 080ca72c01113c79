"""The dataset-source contract, checked for every source in the registry (rlvr.data.source_registry.SOURCES).

For each registered source: a spec of it (its ``example``, or data this suite makes for the sources that read
files: a local file, a dataset folder, a Hub id in a local datasets cache) goes to that source in the order of
tries; its rows are dicts with a non-empty ``prompt`` and a unique string ``id``, and a gold ``answer`` when the
source claims gold; the same spec loads the same rows twice. The unknown-spec error and the table in
docs/design/architecture.md ("Add a dataset source") are the registry's. A source added to the registry is
checked here with nothing to edit in this file (docs/design/architecture.md, "Add a dataset source").
"""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest

import rlvr.data  # noqa: F401  (registers the built-in sources)
from rlvr.cli import main
from rlvr.data import load_rows
from rlvr.data.source_registry import SOURCES, Source, find_source, source_table, sources_in_order, spec_forms
from tests.helpers.cli_output import one_error_line
from tests.helpers.dataset_folders import TRAIN, math_folder, write_jsonl

DOCS = Path(__file__).resolve().parents[2] / "docs" / "design" / "architecture.md"
TABLE_START = "<!-- source table: rlvr.data.source_registry.source_table() -->"
TABLE_END = "<!-- end of source table -->"


def _hub_in_cache(tmp_path: Path) -> str:
    """A Hub id whose splits are in the local datasets cache as ``load_dataset`` leaves them after a download
    (``<cache>/<owner>___<name>/default/<version>/<hash>/``, read offline): the ``hub`` source, offline."""
    from datasets.packaged_modules.json.json import Json

    cache, folder = Path(datasets.config.HF_DATASETS_CACHE), math_folder(tmp_path)
    builder = Json(dataset_name="tiny-math", cache_dir=str(cache), hash="0123abcd",
                   data_files={split: str(folder / f"{split}.jsonl") for split in ("train", "test")})
    builder.download_and_prepare()
    (config_dir,) = (cache / "tiny-math").iterdir()  # 'default-<data files hash>': the Hub's is plain 'default'
    target = cache / "someone___tiny-math" / "default"
    target.parent.mkdir(parents=True)
    config_dir.rename(target)
    return "someone/tiny-math:split=test"


# the sources that read data from outside rlvr: the spec of data made here (every other source has an example)
SPEC_MAKERS = {
    "file": lambda tmp_path: str(write_jsonl(tmp_path / "train.jsonl", TRAIN)),
    "folder": lambda tmp_path: f"{math_folder(tmp_path)}:split=test",
    "hub": _hub_in_cache,
}


@pytest.fixture(autouse=True)
def _offline_datasets(tmp_path, monkeypatch):
    """datasets' cache in the test's folder, and never the network."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _spec(source: Source, tmp_path: Path) -> str:
    if source.example is not None:
        return source.example
    if source.name not in SPEC_MAKERS:
        pytest.fail(f"source {source.name!r} has no example= and this suite cannot make its data: give its Source an "
                    "example= spec that loads offline with nothing else (docs/design/architecture.md, 'Add a dataset "
                    "source')")
    return SPEC_MAKERS[source.name](tmp_path)


def _prompt_problem(prompt) -> str | None:
    """Why ``prompt`` is not a usable prompt (None: it is): a non-empty string or a non-empty list of messages."""
    if isinstance(prompt, str):
        return None if prompt.strip() else f"an empty prompt {prompt!r}"
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt):
        return None if any(str(m["content"]).strip() for m in prompt) else "a chat prompt with no content"
    return f"no prompt (prompt is {prompt!r:.80})"


@pytest.mark.parametrize("name", list(SOURCES))
def test_a_source_gives_rows_with_a_prompt_a_unique_id_and_its_gold(name, tmp_path):
    source = SOURCES[name]
    spec = _spec(source, tmp_path)
    chosen = find_source(spec)
    assert chosen is source, (f"the spec {spec!r} of source {name!r} goes to source "
                              f"{chosen.name if chosen else None!r} first (the order of tries: source_registry)")
    rows = load_rows(spec)
    assert isinstance(rows, list) and rows, f"source {name!r} ({spec}) gave no rows"
    for index, row in enumerate(rows):
        assert isinstance(row, dict), f"source {name!r} ({spec}): row {index} is a {type(row).__name__}, not a dict"
        problem = _prompt_problem(row.get("prompt"))
        assert problem is None, f"source {name!r} ({spec}): row {index} (id {row.get('id')!r}) has {problem}"
        assert isinstance(row.get("id"), str) and row["id"], f"source {name!r} ({spec}): row {index} has no id"
        if source.gold:
            assert isinstance(row.get("answer"), str) and row["answer"].strip(), (
                f"source {name!r} ({spec}) claims gold, but row {index} (id {row['id']!r}) has answer "
                f"{row.get('answer')!r}")
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids), f"source {name!r} ({spec}): ids repeat: {sorted({i for i in ids if ids.count(i) > 1})[:5]}"
    assert load_rows(spec) == rows, f"source {name!r} ({spec}): the same spec loaded different rows twice"


def test_names_and_prefixes_are_tried_before_predicates():
    order = [source.match for source in sources_in_order()]
    assert order == sorted(order, key=lambda match: match == "predicate")
    assert [s.name for s in sources_in_order()][-3:] == ["file", "folder", "hub"]


def test_the_unknown_spec_error_lists_every_registered_source(monkeypatch, capsys):
    """From load_rows and from ``rlvr train`` (its one error line): a source registered now is listed, before
    the predicates' forms (the order of tries)."""
    toy = Source("toy-cubes", lambda spec, **rules: [], "'toy-cubes'", "toy (tests only)")
    monkeypatch.setitem(SOURCES, toy.name, toy)
    with pytest.raises(ValueError) as raised:
        load_rows("no-such-source")
    message = str(raised.value)
    assert message.startswith("dataset spec 'no-such-source' is not a known source, an existing file or a Hub id")
    for source in SOURCES.values():
        assert source.form in message, f"the unknown-spec error does not list {source.name!r}: {message}"
    assert message.endswith(spec_forms()) and message.index("'toy-cubes'") < message.index("a local .jsonl")
    assert main(["train", "model=tiny-random", "data=no-such-source", "--dry-run"]) != 0
    assert one_error_line(capsys) == f"rlvr train: {message}"


def test_a_source_name_is_registered_once():
    from rlvr.data.source_registry import register_source

    with pytest.raises(ValueError, match="'gsm8k-100' is registered already"):
        register_source(SOURCES["gsm8k-100"])
    with pytest.raises(ValueError, match="prefix= exactly with match='prefix'"):
        Source("toy", lambda spec, **rules: [], "'toy:'", "toy", match="prefix")


def test_the_docs_table_is_the_registrys():
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(re.escape(TABLE_START) + r"\n(.*?)\n" + re.escape(TABLE_END), text, re.DOTALL)
    assert found, f"docs/design/architecture.md lacks the source table between {TABLE_START!r} and {TABLE_END!r}"
    assert found.group(1) == source_table(), (
        "docs/design/architecture.md's source table is not the registry's; paste the output of python -c "
        f"'import rlvr.data; from rlvr.data.source_registry import source_table; print(source_table())':\n"
        f"{source_table()}")
