"""assert_no_secret_in_dir finds a secret in text, binary and UTF-16 files and in names."""

import pickle

import pytest

from tests.helpers.secret_scan import assert_no_secret_in_dir

SECRET = "sk-test-secret-1618"


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "config.yaml").write_text("judge_api_key_env: RLVR_KEY\n")
    (tmp_path / "checkpoint-1" / "rng.pt").write_bytes(bytes(range(256)) * 4)
    return tmp_path


def test_a_clean_directory_passes(run_dir):
    assert_no_secret_in_dir(run_dir, SECRET)


@pytest.mark.parametrize("write", [
    lambda d: (d / "metrics.jsonl").write_text(f'{{"note": "key {SECRET}"}}\n'),
    lambda d: (d / "checkpoint-1" / "state.pkl").write_bytes(
        b"\x00\xff" + pickle.dumps({"headers": {"Authorization": f"Bearer {SECRET}"}}) + b"\x00"),
    lambda d: (d / "log.txt").write_bytes(f"key={SECRET}".encode("utf-16")),
    lambda d: (d / "log-be.txt").write_bytes(SECRET.encode("utf-16-be")),
    lambda d: (d / "checkpoint-1" / f"{SECRET}.json").write_text("{}"),
])
def test_a_secret_anywhere_fails_naming_the_file(run_dir, write):
    write(run_dir)
    with pytest.raises(AssertionError, match="the secret was written under"):
        assert_no_secret_in_dir(run_dir, SECRET)


def test_an_empty_directory_or_a_short_secret_is_refused(tmp_path):
    with pytest.raises(AssertionError, match="holds no files"):
        assert_no_secret_in_dir(tmp_path, SECRET)
    with pytest.raises(ValueError, match="at least 8 characters"):
        assert_no_secret_in_dir(tmp_path, "sk-1")
