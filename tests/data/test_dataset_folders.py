"""Data as ``datasets.load_dataset`` reads it (rlvr.data.datasets_loading): local folders with their splits,
save_to_disk folders, a Hub id from the local datasets cache (offline), the default config, missing splits."""

from pathlib import Path

import datasets
import pyarrow
import pyarrow.parquet
import pytest

from rlvr.data import load_rows
from tests.helpers.dataset_folders import TEST, TRAIN, math_folder, write_jsonl


@pytest.fixture(autouse=True)
def _datasets_cache_in_tmp(tmp_path, monkeypatch):
    """load_dataset writes its Arrow cache under HF_DATASETS_CACHE: keep it in the test's own folder."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")


def _ids(prefix: str, rows: list[dict]) -> list[dict]:
    return [{"id": f"{prefix}#{i}", **row} for i, row in enumerate(rows)]


def test_a_folder_gives_each_split_as_load_dataset_names_it(tmp_path):
    folder = math_folder(tmp_path)
    assert load_rows(str(folder)) == _ids("math:train", TRAIN)  # split train by default, as TRL's script
    assert load_rows(f"{folder}:split=test") == _ids("math:test", TEST)


def test_a_folder_of_parquet_shards_under_data(tmp_path):
    folder = tmp_path / "shards"
    (folder / "data").mkdir(parents=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(TRAIN), folder / "data" / "train-00000-of-00001.parquet")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(TEST), folder / "data" / "test-00000-of-00001.parquet")
    assert load_rows(f"{folder}:split=test") == _ids("shards:test", TEST)


def test_config_default_is_the_default_config_of_a_folder_and_of_a_file(tmp_path):
    folder = math_folder(tmp_path)
    assert load_rows(f"{folder}:split=test:config=default") == _ids("math:test", TEST)
    file = folder / "train.jsonl"
    assert load_rows(f"{file}:config=default") == load_rows(str(file)) == _ids("train.jsonl", TRAIN)
    with pytest.raises(ValueError, match="train.jsonl is one file, which has only the default config: remove "
                                         ":config=main"):
        load_rows(f"{file}:config=main")


def test_a_missing_split_is_named_with_the_splits_there_are(tmp_path):
    folder = math_folder(tmp_path)
    with pytest.raises(ValueError, match=rf"split 'validation' not in {folder} \(splits: train, test\); name one"):
        load_rows(f"{folder}:split=validation")
    with pytest.raises(ValueError, match=r"split 'test' not in .*train.jsonl \(splits: train\): a single file is "
                                         r"the split 'train'"):
        load_rows(f"{folder / 'train.jsonl'}:split=test")


def test_save_to_disk_folders_a_dataset_dict_and_a_dataset(tmp_path):
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(TRAIN), "test": datasets.Dataset.from_list(TEST)})
    splits.save_to_disk(str(tmp_path / "saved"))
    assert load_rows(f"{tmp_path / 'saved'}:split=test") == _ids("saved:test", TEST)
    datasets.Dataset.from_list(TEST).save_to_disk(str(tmp_path / "one"))
    assert load_rows(str(tmp_path / "one")) == _ids("one:train", TEST)  # a saved Dataset is the split train
    with pytest.raises(ValueError, match=r"split 'test' not in .*one \(splits: train\)"):
        load_rows(f"{tmp_path / 'one'}:split=test")
    with pytest.raises(ValueError, match="is a save_to_disk folder, which has no configs: remove :config=main"):
        load_rows(f"{tmp_path / 'saved'}:config=main")


def _cache_hub_dataset(cache: Path, repo_id: str, folder: Path) -> None:
    """Put ``folder``'s splits in the datasets cache as ``load_dataset(repo_id)`` leaves them after a download:
    ``<cache>/<owner>___<name>/default/<version>/<hash>/`` (what datasets' offline fallback reads)."""
    from datasets.packaged_modules.json.json import Json

    name = repo_id.split("/")[1]
    builder = Json(dataset_name=name, cache_dir=str(cache), hash="0123abcd",
                   data_files={split: str(folder / f"{split}.jsonl") for split in ("train", "test")})
    builder.download_and_prepare()
    (config_dir,) = (cache / name).iterdir()  # 'default-<data files hash>': the Hub's is plain 'default'
    target = cache / repo_id.replace("/", "___") / "default"
    target.parent.mkdir(parents=True)
    config_dir.rename(target)


def test_a_hub_id_in_the_local_datasets_cache_loads_offline(tmp_path, monkeypatch):
    cache = tmp_path / "hf-datasets-cache"
    _cache_hub_dataset(cache, "someone/tiny-math", math_folder(tmp_path))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # never the network, whatever the environment
    assert load_rows("someone/tiny-math:split=test") == _ids("someone/tiny-math:test", TEST)
    assert load_rows("someone/tiny-math:config=default") == _ids("someone/tiny-math:train", TRAIN)
    with pytest.raises(ValueError, match=r"split 'dev' not in Hub dataset 'someone/tiny-math' \(splits: train, test\)"):
        load_rows("someone/tiny-math:split=dev")


def test_folder_rows_get_rlvrs_row_checks_and_options_are_checked(tmp_path):
    folder = math_folder(tmp_path)
    write_jsonl(folder / "test.jsonl", [{"prompt": "p", "answer": ""}])
    with pytest.raises(ValueError, match="row 0 .*of math:test: field 'answer' is empty"):
        load_rows(f"{folder}:split=test")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['revision'\]; local files and folders take split="):
        load_rows(f"{folder}:revision=main")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="could not load the dataset folder .*empty.* with datasets.load_dataset"):
        load_rows(str(tmp_path / "empty"))
