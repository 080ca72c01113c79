"""The set-up in the Makefile refuses a disk that cannot hold the environment, and says how to fix it."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("target", "venv_var", "min_var"), [("setup", "VENV", "MIN_FREE_GB"),
                                                            ("setup-vllm", "VLLM_VENV", "MIN_FREE_GB_VLLM")])
def test_setup_stops_before_installing_when_the_disk_is_too_full(tmp_path, target, venv_var, min_var):
    assert shutil.which("make"), "make is needed for the README's commands"
    venv = tmp_path / "not" / "yet" / "venv"  # the check looks at the nearest folder that exists
    result = subprocess.run(["make", "-s", target, f"{venv_var}={venv}", f"{min_var}=1000000"],
                            cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "GB free on the disk of" in result.stdout and f"{min_var}=0 skips this check" in result.stdout
    assert not (tmp_path / "not").exists()  # nothing half-installed
