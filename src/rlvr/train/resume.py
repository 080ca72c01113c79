"""What may change when a run is resumed."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from rlvr.config import ExperimentConfig

logger = logging.getLogger(__name__)

# Options that do not change the trajectory of the steps already run.
MAY_CHANGE_ON_RESUME = {
    "max_steps", "resume", "save_steps", "save_total_limit", "progress_bar", "log_completions",
    "num_completions_to_log", "output_dir", "verifier_workers", "nproc", "parallelism", "force_resume", "ddp_timeout",
    "max_skipped_steps",
}


def check_resumable_config(saved_path: Path, cfg: ExperimentConfig) -> None:
    """Refuse to resume with options that would make the resumed run a different run."""
    if not saved_path.exists():
        raise ValueError(f"{saved_path} is missing; this folder was not written by `rlvr train`")
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}
    saved_flat = {k: v for section in saved.values() for k, v in section.items()}
    changed = sorted(
        key for key, value in cfg.flat().items()
        if key not in MAY_CHANGE_ON_RESUME and key in saved_flat and saved_flat[key] != value
    )
    if changed:
        details = ", ".join(f"{k}: {saved_flat[k]!r} -> {cfg.flat()[k]!r}" for k in changed)
        if cfg.run.force_resume:
            logger.warning("force_resume=true: resuming %s with changed options (%s); from here on this is "
                           "a different run than the one that started", saved_path.parent, details)
            return
        raise ValueError(
            f"cannot resume {saved_path.parent}: options changed since it started ({details}); "
            "resume with the original values, start a new output_dir, or pass force_resume=true to "
            "continue with the new values anyway"
        )
