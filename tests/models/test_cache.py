import json
import threading
import time

import pytest

from rlvr.models.cache import MARKER, build_once, fcntl, rlvr_cache_dir


def _writer(calls: list):
    def build(tmp):
        calls.append(tmp)
        (tmp / "weights.txt").write_text("w")
        return {"source": "test"}

    return build


def test_builds_once_then_reuses(tmp_path):
    calls = []
    folder = tmp_path / "models" / "m"
    assert build_once(folder, _writer(calls), description="m") == folder
    assert build_once(folder, _writer(calls), description="m") == folder
    assert len(calls) == 1
    assert (folder / "weights.txt").read_text() == "w"
    assert json.loads((folder / MARKER).read_text()) == {"source": "test"}
    assert sorted(p.name for p in folder.parent.iterdir()) == ["m", "m.lock"]  # no temp leftovers


def test_crashed_build_leaves_nothing_that_counts(tmp_path):
    folder = tmp_path / "m"

    def crash(tmp):
        (tmp / "half.safetensors").write_text("partial")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        build_once(folder, crash, description="m")
    assert not folder.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m.lock"]


def test_folder_without_marker_is_rebuilt(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "half.safetensors").write_text("partial")
    calls = []
    build_once(folder, _writer(calls), description="m")
    assert len(calls) == 1
    assert sorted(p.name for p in folder.iterdir()) == sorted([MARKER, "weights.txt"])


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    assert rlvr_cache_dir() == tmp_path
    monkeypatch.delenv("RLVR_CACHE_DIR")
    assert rlvr_cache_dir().parts[-2:] == (".cache", "rlvr")
    monkeypatch.setenv("RLVR_CACHE_DIR", " ")
    with pytest.raises(ValueError, match="RLVR_CACHE_DIR"):
        rlvr_cache_dir()


@pytest.mark.skipif(fcntl is None, reason="no file locks on this platform")
def test_concurrent_callers_build_once(tmp_path):
    folder = tmp_path / "m"
    calls = []

    def slow_build(tmp):
        calls.append(tmp)
        time.sleep(0.3)
        return {}

    threads = [
        threading.Thread(target=build_once, args=(folder, slow_build), kwargs={"description": "m"})
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and (folder / MARKER).is_file()
