"""push_to_hub: the final model (and, by ``hub_strategy``, each checkpoint) uploaded to the Hugging Face Hub.

TRL's (transformers') options and meanings: ``hub_model_id`` (default: the output_dir folder's name, under
the token's user), ``hub_strategy`` end | every_save (the model at every save, the last one at the end) |
checkpoint (also the latest checkpoint, as ``last-checkpoint/``) | all_checkpoints (every
``checkpoint-N/``), ``hub_private_repo``. What cannot work is refused before anything is trained: an
offline machine (HF_HUB_OFFLINE), or no token. An upload that fails later is logged, and the run goes on
(its files are all on disk): the message says how to push them by hand.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from rlvr.config.sections import RunConfig

logger = logging.getLogger(__name__)

# the model files, training_args.bin and the model card, as transformers' push uploads them
_MODEL_FILES = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "merged/*", "training_args.bin", "README.md")


@dataclass
class HubPush:
    repo_id: str
    strategy: str
    private: bool | None
    output_dir: Path
    api: object  # huggingface_hub.HfApi

    @staticmethod
    def check(run: RunConfig) -> None:
        """ValueError, before anything is written, when push_to_hub cannot work here (offline, no token)."""
        if not run.push_to_hub:
            return
        from huggingface_hub import get_token, is_offline_mode

        if is_offline_mode():
            raise ValueError("push_to_hub=true, but HF_HUB_OFFLINE is set, so nothing can be uploaded; unset "
                             "HF_HUB_OFFLINE on a machine with the network, or set push_to_hub=false (and upload "
                             "output_dir later with `hf upload`)")
        if get_token() is None:
            raise ValueError("push_to_hub=true, but no Hugging Face token is set; run `hf auth login` or set "
                             "HF_TOKEN, or set push_to_hub=false")

    @classmethod
    def from_config(cls, run: RunConfig, output_dir: Path) -> HubPush | None:
        """The uploader of a push_to_hub run (None without push_to_hub): the repository is created now."""
        if not run.push_to_hub:
            return None
        cls.check(run)
        from huggingface_hub import HfApi

        api = HfApi()
        repo_id = run.hub_model_id or Path(output_dir).name
        if "/" not in repo_id:
            repo_id = f"{api.whoami()['name']}/{repo_id}"
        api.create_repo(repo_id, private=run.hub_private_repo, exist_ok=True)
        return cls(repo_id, run.hub_strategy, run.hub_private_repo, Path(output_dir), api)

    def saved(self, checkpoint: Path) -> None:
        """After a checkpoint is written: upload what the strategy asks for."""
        if self.strategy == "end":
            return
        self._upload(checkpoint, "", _MODEL_FILES, f"model at {checkpoint.name}")
        if self.strategy == "checkpoint":
            self._upload(checkpoint, "last-checkpoint", None, f"{checkpoint.name} as last-checkpoint")
        elif self.strategy == "all_checkpoints":
            self._upload(checkpoint, checkpoint.name, None, checkpoint.name)

    def push_final(self) -> None:
        """At the end of the run: the final model at output_dir's top."""
        self._upload(self.output_dir, "", _MODEL_FILES, "final model")

    def _upload(self, folder: Path, path_in_repo: str, patterns, what: str) -> None:
        try:
            self.api.upload_folder(repo_id=self.repo_id, folder_path=str(folder), path_in_repo=path_in_repo or None,
                                   allow_patterns=list(patterns) if patterns else None, commit_message=f"rlvr: {what}")
            logger.info("pushed the %s to https://huggingface.co/%s", what, self.repo_id)
        except Exception as error:  # noqa: BLE001  (the run's files are on disk: a failed upload must not lose it)
            logger.warning("push_to_hub: uploading the %s to %s failed (%s); the files are in %s: upload them with "
                           "`hf upload %s %s`", what, self.repo_id, " ".join(str(error).split())[:300], folder,
                           self.repo_id, folder)
