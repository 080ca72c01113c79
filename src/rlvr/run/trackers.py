"""Experiment trackers: the run's metrics, config and samples also sent to TensorBoard, W&B, trackio, MLflow.

``report_to`` (TRL's name) chooses them; ``none`` (the default) sends nothing and needs nothing
installed. metrics.jsonl stays the record of the run; a tracker holds a copy for viewing, written by
rank 0 with the tracker's own client library:

    tensorboard  torch.utils.tensorboard.SummaryWriter in logging_dir (default output_dir/runs)
    wandb        wandb.init(project=$WANDB_PROJECT or "rlvr", name=run_name, dir=output_dir, config=…)
    trackio      trackio.init(project=$TRACKIO_PROJECT or "rlvr", name=run_name, config=…) (its store: $TRACKIO_DIR)
    mlflow       mlflow.start_run(run_name=…) at $MLFLOW_TRACKING_URI (default output_dir/mlflow.db)

Each entry of TRL's log (``rlvr.train.trl_log``: TRL's names, at its step, every ``logging_steps``) and each
step's own numbers of its metrics.jsonl line (rlvr's series, rlvr's evaluation) at the run's step (TRL-shaped
runs: TRL's global_step, the optimiser steps; one call when both fall on it), the resolved config once at start,
the step's samples.jsonl rows as a table (W&B Table, MLflow table, trackio Table, TensorBoard markdown text), and
at the end of a run transformers' last entry (``train_runtime``, ..., ``train_loss``).

The tags are transformers' (its TensorBoard, W&B, trackio and MLflow callbacks, which TRL logs through), so a
TRL user's dashboards read an rlvr run as they are. A value that TRL logs (``rlvr.train.trl_metric_names.trl_log_name``:
TRL's name computed as TRL computes it, rlvr's evaluation as ``eval_<x>``, a reward function's ``log_metric``)
gets the tag transformers gives that name; every other series, rlvr's own, gets ``rlvr/`` + its metrics.jsonl
name, which no TRL tag starts with:

    metrics.jsonl       TensorBoard, W&B, trackio            MLflow (transformers logs names as they are)
    reward              train/reward                          reward
    loss                train/loss                            loss
    eval/test/pass@1    eval/test/pass@1                      eval_test/pass_1
    train/loss          rlvr/train/loss                       rlvr/train/loss
    rollout/accuracy    rlvr/rollout/accuracy                 rlvr/rollout/accuracy

W&B and trackio also get ``train/global_step`` (the step) in every line, and W&B plots every series
against it (``define_metric``), as transformers sets them up; MLflow's names have the characters it
refuses replaced by ``_``, as transformers does.

Conventions:
- numbers only: ``None``, NaN and ±inf are not sent (metrics.jsonl writes them as null) and are
  counted in ``tracker/skipped_values`` (this step's count); booleans are sent as 0/1.
- a tracker that raises after start-up never stops training: one warning per tracker, and every
  failure is counted in ``tracker/errors`` (since this process started; metrics.jsonl has the count
  after the step's calls, the trackers the count before them). A tracker that cannot start fails
  the run at start-up, with the fix.
- both ``tracker/`` keys exist only when a tracker is on, so a run with ``report_to=none`` writes
  the same metrics.jsonl as before trackers existed.
- a resumed run starts a new tracker run (TensorBoard: a new event file in the same folder); W&B's
  WANDB_RUN_ID + WANDB_RESUME=allow continue the same one, as in TRL.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from rlvr.dependencies import MissingDependency

logger = logging.getLogger(__name__)

# the module each tracker imports, and the pip package that provides it
TRACKER_PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "trackio": ("trackio", "trackio"),
    "mlflow": ("mlflow", "mlflow"),
}


class Tracker(Protocol):
    """One experiment tracker of a run, on rank 0. Each method may raise; :class:`Trackers` counts it.

    ``log_metrics`` gets finite numbers only (float) under the tracker's tags (:func:`tracker_tags`);
    ``log_samples`` gets the step's samples.jsonl rows (dicts with the same keys), never an empty list;
    ``log_summary`` transformers' end-of-training line under TRL's log names (``train_runtime``, ...),
    each tracker treating it as transformers' callback for it does.
    """

    def log_config(self, config: dict[str, dict[str, Any]]) -> None: ...

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_summary(self, step: int, summary: dict[str, float]) -> None: ...

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


def tracker_names(report_to: list[str]) -> list[str]:
    """The trackers ``report_to`` turns on, in order, without duplicates (``none``: no tracker)."""
    return [name for name in dict.fromkeys(report_to) if name != "none"]


def require_trackers(report_to: list[str]) -> None:
    """Import each tracker's library now, so a missing one fails at start-up with the pip command."""
    for name in tracker_names(report_to):
        module, package = TRACKER_PACKAGES[name]
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise MissingDependency(f"report_to={name} needs the {package} package, which cannot be imported ({error}); "
                             f"install it with: pip install 'rlvr[{name}]' (in a checkout: pip install -e "
                             f"'.[{name}]', or pip install {package}), or drop {name} from report_to") from None


# ----------------------------------------------------------------------------- the trackers
class TensorBoardTracker:
    def __init__(self, *, logging_dir: Path, **_: Any):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logging_dir))

    def log_config(self, config: dict[str, dict[str, Any]]) -> None:
        text = yaml.safe_dump(config, sort_keys=False)
        self.writer.add_text("config", "```\n" + text + "```", global_step=0)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.log_metrics(step, {rewrite_log_name(name): value for name, value in summary.items()})

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.writer.add_text("samples", markdown_table(rows), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, *, run_name: str, output_dir: Path, **_: Any):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "rlvr", name=run_name,
                              dir=None if os.environ.get("WANDB_DIR") else str(Path(output_dir).resolve()))
        self.run.define_metric(GLOBAL_STEP)  # transformers' WandbCallback: every series against train/global_step
        self.run.define_metric("*", step_metric=GLOBAL_STEP, step_sync=True)

    def log_config(self, config: dict[str, dict[str, Any]]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, GLOBAL_STEP: step}, step=step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.run.summary.update({k: v for k, v in summary.items() if k in SINGLE_VALUE_SCALARS})
        self.log_metrics(step, {rewrite_log_name(k): v for k, v in summary.items() if k not in SINGLE_VALUE_SCALARS})

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = table_columns(rows)
        self.run.log({"samples": self.wandb.Table(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """trackio stores a run's config once, at ``init``: it is given there (``config``), so a trackio that
    cannot start fails at start-up, and :meth:`log_config` has nothing left to do."""

    def __init__(self, *, run_name: str, config: dict[str, dict[str, Any]], **_: Any):
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT") or "rlvr", name=run_name,
                                space_id=os.environ.get("TRACKIO_SPACE_ID"), config=config,
                                auto_log_cpu=False, auto_log_gpu=False)  # only what metrics.jsonl has

    def log_config(self, config: dict[str, dict[str, Any]]) -> None:
        pass  # given to trackio.init

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, GLOBAL_STEP: step}, step=step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:  # transformers drops the single values
        self.log_metrics(step, {rewrite_log_name(k): v for k, v in summary.items() if k not in SINGLE_VALUE_SCALARS})

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        import pandas as pd

        columns, data = table_columns(rows)
        self.run.log({"samples": self.trackio.Table(dataframe=pd.DataFrame(data, columns=columns))}, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """One MLflow run; samples are appended to one table artifact, samples.json (a ``step`` column).

    Without MLFLOW_TRACKING_URI the store is MLflow's recommended SQLite file, output_dir/mlflow.db,
    with the artifacts in output_dir/mlartifacts (MLflow 3 refuses a new ./mlruns file store).
    """

    def __init__(self, *, run_name: str, output_dir: Path, **_: Any):
        import mlflow

        self.mlflow, artifacts = mlflow, None
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            mlflow.set_tracking_uri(f"sqlite:///{(output_dir / 'mlflow.db').resolve()}")
            artifacts = (output_dir / "mlartifacts").resolve().as_uri()
        if not os.environ.get("MLFLOW_EXPERIMENT_ID"):
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "rlvr"
            if mlflow.get_experiment_by_name(name) is None:
                mlflow.create_experiment(name, artifact_location=artifacts)
            mlflow.set_experiment(name)
        self.run = mlflow.start_run(run_name=run_name)

    def log_config(self, config: dict[str, dict[str, Any]]) -> None:
        params = [(key, "null" if value is None else str(value))
                  for section in config.values() for key, value in section.items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.mlflow.log_params(dict(params[start:start + 100]))
        self.mlflow.log_dict(config, "config.yaml")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.log_metrics(step, {mlflow_name(k): v for k, v in summary.items()})

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        columns, data = table_columns(rows)
        self.mlflow.log_table({c: [row[i] for row in data] for i, c in enumerate(columns)}, "samples.json")

    def close(self) -> None:
        self.mlflow.end_run()


# ----------------------------------------------------------------------------- the tags
RLVR_PREFIX = "rlvr/"  # rlvr's own series; no tag transformers writes starts with it
GLOBAL_STEP = "train/global_step"  # W&B's and trackio's step series, as transformers logs it
# transformers' WandbCallback puts these into the run's summary (trackio's drops them) instead of a series
SINGLE_VALUE_SCALARS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
                        "total_flos")
MLFLOW_REFUSED = re.compile(r"[^0-9A-Za-z_\-. :/]")  # transformers' MLflowCallback replaces these with "_"


def rewrite_log_name(name: str) -> str:
    """transformers' ``rewrite_logs`` (TensorBoard, W&B, trackio): ``eval_x`` -> ``eval/x``, ``test_x`` ->
    ``test/x``, any other ``x`` -> ``train/x``."""
    for split in ("eval", "test"):
        if name.startswith(split + "_"):
            return f"{split}/{name.removeprefix(split + '_')}"
    return "train/" + name


def mlflow_name(name: str) -> str:
    """transformers' MLflowCallback: the log name as it is, the characters MLflow refuses replaced by ``_``."""
    return MLFLOW_REFUSED.sub("_", name)


def tracker_tags(numbers: dict[str, float], log_name: Callable[[str], str | None], *,
                 tracker: str) -> dict[str, float]:
    """The tags ``tracker`` gets for a metrics.jsonl line's numbers: a series TRL logs (``log_name`` gives its
    name in TRL's log, None for rlvr's own) under transformers' tag for that name, rlvr's own under
    ``rlvr/<metrics.jsonl name>``; for MLflow both as transformers' MLflowCallback writes names."""
    tags = {}
    for key, value in numbers.items():
        name = log_name(key)
        if tracker == "mlflow":
            tag = mlflow_name(RLVR_PREFIX + key if name is None else name)
        else:
            tag = RLVR_PREFIX + key if name is None else rewrite_log_name(name)
        assert tag not in tags, f"{key} and another metric both map to the tracker tag {tag}"
        tags[tag] = value
    return tags


TRACKERS: dict[str, Callable[..., Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "trackio": TrackioTracker,
    "mlflow": MlflowTracker,
}


# ----------------------------------------------------------------------------- the fan-out
class Trackers:
    """The run's trackers: each call goes to each; a failure is warned about once per tracker and counted."""

    def __init__(self, trackers: dict[str, Tracker], log_name: Callable[[str], str | None] = lambda key: None):
        self.trackers = trackers
        self.log_name = log_name  # a metrics.jsonl name -> its name in TRL's log (None: rlvr's own series)
        self.errors = 0
        self.warned: set[str] = set()

    def log_config(self, config: dict[str, dict[str, Any]]) -> None:
        for name, tracker in self.trackers.items():
            self._call(name, "log_config", lambda t=tracker: t.log_config(config))

    def log_step(self, step: int, metrics: dict[str, Any], samples: list[dict[str, Any]],
                 trl: dict[str, Any] | None = None) -> dict[str, int]:
        """Send the step's metrics (and samples), with ``trl``, an entry of TRL's log at the same step (TRL's names,
        ``rlvr.train.trl_log``), in one call; return the ``tracker/`` counts for metrics.jsonl ({} if none)."""
        if not self.trackers:
            return {}
        numbers, skipped = finite_numbers(metrics)
        entry, skipped_trl = finite_numbers(trl or {})
        skipped += skipped_trl
        numbers.update({"tracker/errors": float(self.errors), "tracker/skipped_values": float(skipped)})
        for name, tracker in self.trackers.items():
            tags = tracker_tags(entry, lambda key: key, tracker=name)
            own = tracker_tags(numbers, self.log_name, tracker=name)
            assert not set(tags) & set(own), f"{sorted(set(tags) & set(own))}: both TRL's log and rlvr's series"
            tags |= own
            self._call(name, "log_metrics", lambda t=tracker, m=tags: t.log_metrics(step, m))
            if samples:
                self._call(name, "log_samples", lambda t=tracker: t.log_samples(step, samples))
        return {"tracker/errors": self.errors, "tracker/skipped_values": skipped}

    def log_entry(self, step: int, entry: dict[str, Any]) -> None:
        """An evaluation's entry of its own (TRL's log names: ``eval_loss``, ..., ``epoch``) at ``step``, under the tags
        transformers' callbacks give those names (``eval/loss``, ``train/epoch``; MLflow: the names); its
        non-numbers are not sent, and no ``tracker/`` count comes with it."""
        numbers, _ = finite_numbers(entry)
        for name, tracker in self.trackers.items():
            tags = tracker_tags(numbers, lambda key: key, tracker=name)
            self._call(name, "log_metrics", lambda t=tracker, m=tags: t.log_metrics(step, m))

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        """transformers' end-of-training entry (TRL's log names, ``rlvr.train.trl_log``); its non-numbers (a TRL
        metric whose values were all NaN) are not sent, as transformers' callbacks skip them."""
        summary, _ = finite_numbers(summary)
        for name, tracker in self.trackers.items():
            self._call(name, "log_summary", lambda t=tracker: t.log_summary(step, summary))

    def close(self) -> None:
        for name, tracker in self.trackers.items():
            self._call(name, "close", tracker.close)
        if self.errors:
            logger.warning("experiment trackers: %d calls failed in this run (tracker/errors in metrics.jsonl); "
                           "metrics.jsonl holds every step", self.errors)
        self.trackers = {}

    def _call(self, name: str, what: str, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as error:  # noqa: BLE001  (a tracker: network, disk, its own bug; never stops training)
            self.errors += 1
            if name not in self.warned:
                self.warned.add(name)
                logger.warning("report_to=%s: %s failed (%s: %s); training goes on, metrics.jsonl keeps every "
                               "step, and this and later failures are counted in tracker/errors",
                               name, what, type(error).__name__, error)


def open_trackers(report_to: list[str], *, run_name: str | None, logging_dir: str | None, output_dir: Path,
                  config: dict[str, dict[str, Any]],
                  log_name: Callable[[str], str | None] = lambda key: None) -> Trackers:
    """Start each tracker of ``report_to`` and send it the resolved config (rank 0, at start-up).

    ``run_name`` None: the run directory's name (TRL: output_dir); ``logging_dir`` None: output_dir/runs;
    ``log_name``: a metrics.jsonl name's name in TRL's log, None for rlvr's own series (:func:`tracker_tags`).
    A tracker that cannot start raises ValueError naming it and the fix.
    """
    settings = dict(run_name=run_name or output_dir.name, output_dir=output_dir, config=config,
                    logging_dir=Path(logging_dir) if logging_dir else output_dir / "runs")
    require_trackers(report_to)
    opened: dict[str, Tracker] = {}
    for name in tracker_names(report_to):
        try:
            opened[name] = TRACKERS[name](**settings)
        except Exception as error:
            Trackers(opened).close()
            raise ValueError(f"report_to={name}: the tracker did not start ({type(error).__name__}: {error}); "
                             f"{START_HINTS[name]}, or drop {name} from report_to") from error
    trackers = Trackers(opened, log_name)
    trackers.log_config(config)
    return trackers


START_HINTS = {
    "tensorboard": "check that logging_dir can be written",
    "wandb": "log in with `wandb login`, or set WANDB_MODE=offline (sync later with `wandb sync`)",
    "trackio": "check TRACKIO_DIR (a writable folder) and TRACKIO_SPACE_ID",
    "mlflow": "check MLFLOW_TRACKING_URI (unset: sqlite:///output_dir/mlflow.db)",
}


# ----------------------------------------------------------------------------- values
def finite_numbers(metrics: dict[str, Any]) -> tuple[dict[str, float], int]:
    """The finite numbers of a metrics line as floats (``step`` left out), and how many values were not."""
    numbers, skipped = {}, 0
    for key, value in metrics.items():
        if key == "step":
            continue
        if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
            value = value.item()
        if isinstance(value, (int, float)) and math.isfinite(value):
            numbers[key] = float(value)
        else:
            skipped += 1
    return numbers, skipped


def table_columns(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Columns (the keys, in first-seen order) and rows of cells: numbers, booleans and None kept, the rest str."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cell = lambda v: v if v is None or isinstance(v, (bool, int, float, str)) else str(v)
    return columns, [[cell(row.get(c)) for c in columns] for row in rows]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (TensorBoard's text tab renders it); cells on one line each."""
    columns, data = table_columns(rows)
    escape = lambda v: "" if v is None else str(v).replace("|", "\\|").replace("\n", "<br>")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(escape(v) for v in row) + " |" for row in data]
    return "\n".join(lines)
