"""One split of data as the ``datasets`` library loads it: a local folder, a ``save_to_disk`` folder, a Hub id.

TRL's ``trl grpo`` script and open-r1's ``grpo.py`` call ``datasets.load_dataset(dataset_name, dataset_config)``
and then take ``dataset[dataset_train_split]`` / ``dataset[dataset_test_split]``; rlvr does the same here, so a
folder with ``train.jsonl`` + ``test.jsonl`` (or ``data/train-*.parquet``, or a README's configs), a Hub id
(online, or offline from the local datasets cache) and a folder written by ``save_to_disk``
(``datasets.load_from_disk``; a saved ``Dataset`` is the one split ``train``) give the rows TRL's script trains on.
A missing split is named with the splits there are. The config ``default`` (or none) is the dataset's default
config, as ``datasets`` names the one config of a dataset without named configs.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_SPLIT = "train"  # TRL's dataset_train_split default, and the one split of a single file
DEFAULT_CONFIG = "default"  # datasets' name of the config of a dataset without named configs
_SAVED_MARKERS = ("dataset_dict.json", "state.json")  # what save_to_disk writes (DatasetDict, Dataset)


def config_name(config: str | None) -> str | None:
    """The config to pass to ``datasets``: None (the default config) for None, '' and 'default'."""
    return None if config in (None, "", DEFAULT_CONFIG) else config


def is_saved_folder(path: Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return path.is_dir() and any((path / marker).is_file() for marker in _SAVED_MARKERS)


def pick_split(splits: dict, split: str, where: str):
    """``splits[split]``, or ValueError naming the missing split and the ones ``where`` has."""
    if split not in splits:
        raise ValueError(f"split {split!r} not in {where} (splits: {', '.join(splits)}); name one of them with "
                         ":split=NAME (TRL: dataset_train_split / dataset_test_split)")
    return splits[split]


def load_folder_split(path: Path, split: str, config: str | None):
    """The ``datasets.Dataset`` of ``split`` in a local folder (``save_to_disk``'s, or one ``load_dataset`` reads)."""
    import datasets

    if is_saved_folder(path):
        if config_name(config) is not None:
            raise ValueError(f"{path} is a save_to_disk folder, which has no configs: remove :config={config} "
                             "(TRL: dataset_config)")
        saved = datasets.load_from_disk(str(path))
        splits = dict(saved) if isinstance(saved, datasets.DatasetDict) else {DEFAULT_SPLIT: saved}
        return pick_split(splits, split, str(path))
    try:
        loaded = datasets.load_dataset(str(path), config_name(config))
    except Exception as error:  # datasets raises many types (FileNotFoundError, ValueError, DataFilesNotFoundError...)
        raise ValueError(
            f"could not load the dataset folder {str(path)!r} (config {config!r}) with datasets.load_dataset: "
            f"{type(error).__name__}: {error}. A dataset folder holds data files datasets recognises (train.jsonl + "
            "test.jsonl, data/train-*.parquet, ...: https://huggingface.co/docs/datasets/repository_structure) or "
            "is a save_to_disk folder; a config is one its README.md declares, or default (TRL: dataset_config)"
        ) from error
    return pick_split(loaded, split, str(path))


def load_hub_split(name: str, split: str, config: str | None, *, hint: str):
    """The ``datasets.Dataset`` of ``split`` of Hub dataset ``name`` (online, or offline from the local cache)."""
    import datasets

    try:
        loaded = datasets.load_dataset(name, config_name(config))
    except Exception as error:  # datasets raises many types (ConnectionError, FileNotFoundError, ValueError...)
        raise ValueError(
            f"could not load Hugging Face Hub dataset {name!r} (config {config!r}, split {split!r}): "
            f"{type(error).__name__}: {error}. {hint}"
        ) from error
    return pick_split(loaded, split, f"Hub dataset {name!r}" + (f" (config {config!r})" if config else ""))

