"""push_to_hub: refused at start-up where it cannot work (offline, no token), before any folder is written;
where it can, the final model and (hub_strategy) each checkpoint are uploaded, with huggingface_hub's client
(replaced here by a recorder: nothing leaves this machine)."""

from __future__ import annotations

from typing import ClassVar

import huggingface_hub
import pytest

from rlvr.cli import main
from rlvr.config import build_config
from rlvr.train.run_plan import async_lag_warning
from rlvr.train.trainer import Trainer


def test_push_to_hub_offline_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    code = main(["train", "model=tiny-random", "push_to_hub=true", "max_steps=1"])
    err = capsys.readouterr().err
    assert code == 2 and "push_to_hub=true, but HF_HUB_OFFLINE is set" in err
    assert len(err.strip().splitlines()) == 1  # one line, no traceback
    assert not (tmp_path / "runs").exists()  # no run folder was made


class RecordingApi:
    """huggingface_hub.HfApi's calls rlvr makes, recorded."""

    calls: ClassVar[list] = []

    def whoami(self):
        return {"name": "someone"}

    def create_repo(self, repo_id, private=None, exist_ok=False):
        self.calls.append(("create_repo", repo_id, private))

    def upload_folder(self, *, repo_id, folder_path, path_in_repo=None, allow_patterns=None, commit_message=""):
        self.calls.append(("upload", repo_id, path_in_repo, commit_message))


def test_push_to_hub_uploads_the_model_and_checkpoints(tmp_path, monkeypatch):
    RecordingApi.calls = []
    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    cfg = build_config({"model": "tiny-random", "data": "rg:basic_arithmetic:size=8", "max_steps": 2, "save_steps": 1,
                        "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 4,
                        "output_dir": str(tmp_path / "my-run"), "push_to_hub": True, "hub_strategy": "checkpoint",
                        "hub_private_repo": True, "progress_bar": False, "verifier_workers": 1})
    Trainer(cfg).train()
    calls = RecordingApi.calls
    assert calls[0] == ("create_repo", "someone/my-run", True)  # hub_model_id unset: the folder's name
    uploads = [(path, message) for _, _, path, message in calls[1:]]
    assert uploads == [(None, "rlvr: model at checkpoint-1"), ("last-checkpoint", "rlvr: checkpoint-1 as last-checkpoint"),
                       (None, "rlvr: model at checkpoint-2"), ("last-checkpoint", "rlvr: checkpoint-2 as last-checkpoint"),
                       (None, "rlvr: final model")]


@pytest.mark.parametrize(("async_generation", "correction", "warns"), [
    (True, None, True), (True, object(), False), (False, None, False)])
def test_async_generation_without_the_correction_warns(async_generation, correction, warns):
    warning = async_lag_warning(async_generation, correction)
    assert (warning is not None) == warns
    if warns:
        assert "trains on responses sampled by the weights of the step before" in warning
