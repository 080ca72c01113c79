"""Resuming a run: which checkpoint, what may change, and whether the logs agree with it.

``resume=true`` takes the newest intact checkpoint of output_dir; ``resume_from_checkpoint=PATH``
(TRL/transformers' name) the one named, which must belong to output_dir (unset: output_dir is
PATH's run folder), since a run continues in its own folder (its config.yaml, metrics.jsonl).
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from rlvr.run.checkpoint_check import checkpoint_problem, newest_intact
from rlvr.run.checkpoint_files import STATE_FILE, checkpoint_step, list_checkpoints

logger = logging.getLogger(__name__)

# Options that do not change the trajectory of the steps already run.
MAY_CHANGE_ON_RESUME = {
    "max_steps", "resume", "save_strategy", "save_steps", "save_total_limit", "metric_for_best_model",
    "greater_is_better", "progress_bar", "log_completions",
    "num_completions_to_log", "output_dir", "verifier_workers", "nproc", "parallelism", "force_resume", "ddp_timeout",
    "max_skipped_steps", "max_reward_error_frac", "reward_timeout", "overwrite_output_dir",
    "max_prompt_length", "report_to", "run_name", "logging_dir", "resume_from_checkpoint", "save_merged_model",
    # where and with how much memory the rollouts run, not what they sample: a restarted vLLM server may
    # come back on another host or port
    "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout", "vllm_group_port",
    "vllm_gpu_memory_utilization", "vllm_kv_cache_tokens", "max_rollout_batch_size",
}


def check_resumable_config(saved_path: Path, options: dict, *, force: bool = False) -> None:
    """Refuse to resume with options that would make the resumed run a different run.

    ``options``: the run's flat options (``ExperimentConfig.flat()``); ``force``: force_resume.
    """
    if not saved_path.exists():
        raise ValueError(f"{saved_path} is missing; this folder was not written by `rlvr train`")
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}
    saved_flat = {k: v for section in saved.values() for k, v in section.items()}
    changed = sorted(
        key for key, value in options.items()
        if key not in MAY_CHANGE_ON_RESUME and key in saved_flat and saved_flat[key] != value
    )
    if changed:
        details = ", ".join(f"{k}: {saved_flat[k]!r} -> {options[k]!r}" for k in changed)
        if force:
            logger.warning("force_resume=true: resuming %s with changed options (%s); from here on this is "
                           "a different run than the one that started", saved_path.parent, details)
            return
        raise ValueError(
            f"cannot resume {saved_path.parent}: options changed since it started ({details}); "
            "resume with the original values, start a new output_dir, or pass force_resume=true to "
            "continue with the new values anyway"
        )


def resume_output_dir(output_dir: str | None, resume_from_checkpoint: str | None) -> str | None:
    """The output_dir of a run: as given, or (unset) the run folder of ``resume_from_checkpoint``.

    ValueError when the checkpoint does not exist, is not an rlvr checkpoint, or belongs to another
    run folder than output_dir.
    """
    if resume_from_checkpoint is None:
        return output_dir
    folder = _checked_checkpoint(resume_from_checkpoint)
    run = folder.parent  # a checkpoint-N folder sits in its run folder
    if output_dir is not None and Path(output_dir).expanduser().resolve() != run.resolve():
        raise ValueError(f"resume_from_checkpoint={resume_from_checkpoint} is a checkpoint of the run {run}, not of "
                         f"output_dir={output_dir}: a run continues in its own folder. Pass output_dir={run} (or "
                         "leave output_dir unset), or copy that run folder and resume from the copy's checkpoint")
    return str(run) if output_dir is None else output_dir


def _checked_checkpoint(path: str) -> Path:
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ValueError(f"resume_from_checkpoint={path} does not exist; pass a checkpoint folder of a run, "
                         "OUTPUT_DIR/checkpoint-N, or resume=true (with output_dir) for its newest checkpoint")
    if (folder / "trainer_state.json").is_file() and not (folder / STATE_FILE).is_file():
        raise ValueError(foreign_checkpoint(path))
    if checkpoint_step(folder) is None or not (folder / STATE_FILE).is_file():
        inside = [p.name for p in list_checkpoints(folder)] if folder.is_dir() else []
        hint = (f"it is a run folder: pass one of its checkpoints ({', '.join(inside)}), or output_dir={path} "
                "resume=true for the newest" if inside else
                f"pass a checkpoint-N folder written by `rlvr train` (it holds {STATE_FILE}, optimizer.pt "
                "and the model)")
        raise ValueError(f"resume_from_checkpoint={path} is not an rlvr checkpoint; {hint}")
    return folder


def foreign_checkpoint(path) -> str:
    """Why a transformers/TRL checkpoint (trainer_state.json without rlvr_state.json) does not resume under rlvr,
    and what does: its weights start a new run; TRL resumes it."""
    return (f"{path} is a transformers/TRL checkpoint (trainer_state.json, no {STATE_FILE}): rlvr resumes only its "
            "own checkpoints, which also hold the data position, rlvr's counters and its run folder (config.yaml, "
            f"metrics.jsonl), none of which TRL writes. Start a new run from its weights with model={path} and a "
            "new output_dir (the optimiser state starts afresh), or resume it with TRL")


def resume_checkpoint(output_dir: Path, resume_from_checkpoint: str | None = None) -> Path | None:
    """The checkpoint to resume ``output_dir`` from: ``resume_from_checkpoint`` when given (refused
    when damaged), else the newest intact one (None: there is none at all).

    Damaged ones (``checkpoint_check.checkpoint_problem``) are passed over with a warning naming
    what is wrong; when every checkpoint is damaged the resume is refused with the fix.
    """
    if resume_from_checkpoint is not None:
        folder = _checked_checkpoint(resume_from_checkpoint)
        problem = checkpoint_problem(folder)
        if problem is not None:
            raise ValueError(f"resume_from_checkpoint={resume_from_checkpoint} is damaged ({problem}); pass an "
                             "earlier checkpoint, or resume=true for the newest intact one")
        return folder
    checkpoints = list_checkpoints(output_dir)
    found, damaged = newest_intact(checkpoints)
    for folder, problem in damaged:
        logger.warning("checkpoint %s is damaged (%s); %s", folder.name, problem,
                       f"resuming from {found.name} instead" if found else "no older one is intact")
    if checkpoints and found is None:
        raise ValueError(f"every checkpoint in {output_dir} is damaged "
                         f"({'; '.join(f'{f.name}: {p}' for f, p in damaged)}); nothing can be resumed. "
                         "Start over with overwrite_output_dir=true, or choose a new output_dir")
    return found


def check_logged_steps(records: list[dict], step: int, output_dir: Path, *, force: bool) -> None:
    """metrics.jsonl must hold steps 1..``step`` once each when resuming from a checkpoint at ``step``.

    A file cut short (a copy that lost its tail, an edit) would otherwise resume with a gap
    (steps 1, 2, 3, 7, 8, ...). ``force_resume=true`` accepts the gap, with a warning.
    """
    steps = [r.get("step") for r in records]
    if steps == list(range(1, step + 1)):
        return
    missing = sorted(set(range(1, step + 1)) - set(steps))
    detail = (f"lacks steps {_ranges(missing)}" if missing else f"holds steps {_ranges(steps)} (duplicates or out "
              "of order)")
    message = (f"{output_dir / 'metrics.jsonl'} {detail}, but the checkpoint is at step {step}: resuming would "
               "leave a gap in the metrics")
    if force:
        logger.warning("%s; force_resume=true: resuming anyway", message)
        return
    raise ValueError(f"{message}. Restore the file, resume from an earlier checkpoint (resume_from_checkpoint="
                     f"{output_dir}/checkpoint-N), or pass force_resume=true to accept the gap")


def _ranges(values: list[int]) -> str:
    """``[1, 2, 3, 7]`` → ``"1-3, 7"``."""
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)
