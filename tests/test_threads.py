"""rlvr's OpenMP set-up (src/rlvr/threads.py): sleeping threads by default, the user's choice kept."""

import os
import subprocess
import sys

import pytest

from rlvr import threads

PROBE = "import os, rlvr, rlvr.threads as t; print(os.environ.get('OMP_WAIT_POLICY'), '|', t.applied())"


def _fresh_process(**env_extra) -> str:
    """What a new interpreter that imports rlvr first (as the `rlvr` command does) ends up with."""
    env = {k: v for k, v in os.environ.items() if k not in threads.USER_CHOICES}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_default_is_passive_before_torch_loads():
    out = _fresh_process()
    assert out.startswith("PASSIVE |") and "rlvr's default" in out


@pytest.mark.parametrize("choice", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_the_users_choice_is_kept(choice):
    out = _fresh_process(**choice)
    policy, line = (part.strip() for part in out.split("|"))
    assert policy == choice.get("OMP_WAIT_POLICY", "None")
    assert "the user's" in line and next(iter(choice)) in line


def test_torch_loaded_first_is_reported(monkeypatch):
    """In this test process torch is already loaded: apply() still sets the variable (children
    inherit it) but says this process keeps libgomp's default."""
    for name in threads.USER_CHOICES:  # set then removed: monkeypatch restores the original at the end
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    monkeypatch.setattr(threads, "_state", {"set_by_rlvr": False, "torch_was_loaded": False})
    import torch  # noqa: F401

    threads.apply()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "torch was imported before rlvr" in threads.applied()
