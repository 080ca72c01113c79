"""Opening the run folder at the start of a run: continued (resume), replaced (overwrite_output_dir) or begun,
never silently restarted. Every rank takes part (the checkpoint found is broadcast); only rank 0 writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlvr.parallel.runtime import DistContext
from rlvr.run import checkpoints as ckpt
from rlvr.run.folder import (
    JsonlLog,
    check_not_foreign,
    check_not_nested,
    check_path_encodable,
    mark_run_folder,
    new_run_folder,
    write_config,
)
from rlvr.run.resume import check_resumable_config, resume_checkpoint, resume_output_dir


def run_folder(dist: DistContext, *, output_dir: str | None, resume_from_checkpoint: str | None, prefix: str,
               logging_dir: str | None) -> Path:
    """The run's folder, one for every rank and absolute (a reward function that changes the working directory
    does not move where the run writes): output_dir, the checkpoint's run, or a new folder named after ``prefix``
    (made by rank 0, exclusively). Checked before anything is loaded or written: its name encodes, it is no
    other program's folder and lies in no other run's."""
    name = resume_output_dir(output_dir, resume_from_checkpoint)  # unset: the checkpoint's run
    if name is None and dist.is_main:
        name = str(new_run_folder(prefix))  # unique: created exclusively
    folder = Path(os.path.abspath(dist.broadcast_object(name)))
    check_path_encodable(folder)  # fail before loading or writing anything
    if logging_dir:
        check_path_encodable(Path(logging_dir), "logging_dir")
    check_not_foreign(folder)
    check_not_nested(folder)
    return folder


def check_output_dir(output_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """A folder holding a run is continued (resume=true) or replaced (overwrite_output_dir=true), never
    silently restarted; resume=true on metrics without a checkpoint does not wipe them."""
    metrics = output_dir / "metrics.jsonl"
    has_metrics = metrics.exists() and metrics.stat().st_size > 0
    has_checkpoint = bool(ckpt.list_checkpoints(output_dir))
    if overwrite or not (has_metrics or has_checkpoint):
        return
    if not resume:
        raise ValueError(f"{output_dir} already holds a run; pass resume=true to continue it, "
                         "overwrite_output_dir=true to start it over, or choose a new output_dir")
    if not has_checkpoint:
        raise ValueError(f"resume=true but {output_dir} has metrics and no checkpoint to resume from "
                         "(it stopped before its first save); starting over would wipe its metrics.jsonl: "
                         "pass overwrite_output_dir=true to start over, or choose a new output_dir")


def open_run_folder(output_dir: Path, dist: DistContext, *, resume: bool, resume_from_checkpoint: str | None,
                    force_resume: bool, overwrite: bool, config: dict[str, Any], flat: dict[str, Any],
                    logs: tuple[JsonlLog, ...]) -> Path | None:
    """The checkpoint to resume from (its config checked against ``flat``), or None for a new run, whose folder
    is then begun: old checkpoints removed (overwrite), config.yaml written, ``logs`` emptied."""
    main = dist.is_main
    check_output_dir(output_dir, resume=resume, overwrite=overwrite)
    dist.barrier()  # every rank has looked at the folder before rank 0 writes to it
    found = dist.broadcast_object(resume_checkpoint(output_dir, resume_from_checkpoint) if main and resume else None)
    if found is not None:
        check_resumable_config(output_dir / "config.yaml", flat, force=force_resume)
    if main:
        mark_run_folder(output_dir)
    if found is None:
        if main:
            if overwrite:
                ckpt.remove_checkpoints(output_dir)
            write_config(output_dir / "config.yaml", config)
            for log in logs:
                log.reset()
        dist.barrier()
    return found
