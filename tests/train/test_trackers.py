"""Experiment trackers (report_to): the config, a tracker that fails, and each library's run read back.

Each library test runs a tiny 2-step training with report_to=<tracker> and reads the run back with
the library's own reader (TensorBoard's EventAccumulator, W&B's .wandb record file, trackio's
SQLite store, MLflow's client), comparing every metric of every step with metrics.jsonl. The four
libraries are installed by `make setup`; a test whose library is missing fails (it does not skip).
"""

import json
import logging
import math
import sys

import pytest
import yaml

from rlvr.config import build_config, parse_cli_value
from rlvr.config.sections import TRACKER_NAMES
from rlvr.run import trackers
from rlvr.train.trainer import Trainer
from rlvr.train.trl_metric_names import TRL_SUMMARY, trl_log_name

from .conftest import LOWERCASE_REWARD, tiny_overrides


# ----------------------------------------------------------------------------- config
def test_report_to_takes_a_comma_list_and_defaults_to_none():
    assert build_config({}).run.report_to == ["none"]
    assert parse_cli_value("report_to", "tensorboard,wandb") == ["tensorboard", "wandb"]
    assert build_config({"report_to": "mlflow, trackio"}).run.report_to == ["mlflow", "trackio"]
    assert trackers.tracker_names(["none"]) == []
    assert trackers.tracker_names(["wandb", "tensorboard", "wandb"]) == ["wandb", "tensorboard"]


def test_an_unknown_tracker_lists_the_valid_ones():
    with pytest.raises(ValueError, match="report_to") as error:
        build_config({"report_to": "tensorbord"})
    assert all(name in str(error.value) for name in TRACKER_NAMES)
    with pytest.raises(ValueError, match="none means no tracker"):
        build_config({"report_to": ["none", "wandb"]})


def test_every_tracker_name_has_a_class_and_a_package():
    assert set(trackers.TRACKERS) == set(trackers.TRACKER_PACKAGES) == set(TRACKER_NAMES) - {"none"}


@pytest.mark.parametrize("name", sorted(set(TRACKER_NAMES) - {"none"}))
def test_a_tracker_whose_package_is_missing_fails_at_start_up_with_the_pip_command(tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, trackers.TRACKER_PACKAGES[name][0], None)  # import now raises ImportError
    cfg = build_config(tiny_overrides(tmp_path / "run", report_to=name))
    with pytest.raises(ValueError, match=rf"pip install 'rlvr\[{name}\]'"):
        Trainer(cfg)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # before anything was written


# ----------------------------------------------------------------------------- the fan-out
class Recording:
    """A tracker that keeps what it was sent."""

    def __init__(self, **settings):
        self.settings, self.config, self.metrics, self.samples, self.closed = settings, None, {}, {}, False
        RECORDED.append(self)

    def log_config(self, config):
        self.config = config

    def log_metrics(self, step, metrics):
        self.metrics[step] = dict(metrics)

    def log_samples(self, step, rows):
        self.samples[step] = list(rows)

    def log_summary(self, step, summary):
        self.summary = (step, dict(summary))

    def close(self):
        self.closed = True


class Failing(Recording):
    """A tracker whose every metrics and samples call raises (a lost connection, a full disk)."""

    def log_metrics(self, step, metrics):
        raise ConnectionError("tracker server unreachable")

    def log_samples(self, step, rows):
        raise ConnectionError("tracker server unreachable")


RECORDED: list[Recording] = []


def test_a_tracker_that_raises_never_stops_training_and_is_counted(tmp_path, monkeypatch, caplog):
    RECORDED.clear()
    for name, cls in (("tensorboard", Recording), ("wandb", Failing)):
        monkeypatch.setitem(trackers.TRACKERS, name, cls)
        monkeypatch.setitem(trackers.TRACKER_PACKAGES, name, ("json", "json"))  # "installed"
    cfg = build_config(tiny_overrides(tmp_path / "run", max_steps=2, report_to="tensorboard,wandb",
                                      run_name="my-run"))
    with caplog.at_level(logging.WARNING, logger="rlvr.run.trackers"):
        history = Trainer(cfg).train()
    assert len(history) == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # step 1: the failing tracker's metrics and samples calls (2); step 2: 2 more
    assert [line["tracker/errors"] for line in lines] == [2, 4]
    assert len([r for r in caplog.records if "report_to=wandb" in r.getMessage()]) == 1  # warned once
    assert any("4 calls failed" in r.getMessage() for r in caplog.records)  # and summed up at the end
    good, bad = RECORDED
    assert good.closed and bad.closed and good.config == bad.config == cfg.to_dict()
    assert good.settings["run_name"] == "my-run" and good.settings["logging_dir"] == tmp_path / "run" / "runs"
    # the working tracker got every finite number of each line (tagged); tracker/errors as before the step's calls
    for line in lines:
        sent = good.metrics[line["step"]]
        assert sent["rlvr/tracker/errors"] == line["tracker/errors"] - 2
        _assert_same_numbers(line, sent, ignore=("rlvr/tracker/errors",))
    assert good.summary[0] == 2 and set(good.summary[1]) == set(TRL_SUMMARY)  # transformers' last line
    samples = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert [row for step in (1, 2) for row in good.samples[step]] == samples


def test_numbers_only_and_the_skipped_ones_counted():
    numbers, skipped = trackers.finite_numbers({"step": 3, "a": 1, "b": 0.5, "c": None, "d": math.nan,
                                                "e": math.inf, "f": True, "g": "text"})
    assert numbers == {"a": 1.0, "b": 0.5, "f": 1.0} and skipped == 4
    assert trackers.markdown_table([{"x": "a|b\nc", "y": None}]) == "| x | y |\n|---|---|\n| a\\|b<br>c |  |"


def _assert_same_numbers(line: dict, sent: dict, *, ignore=()):
    """Every finite number of the metrics.jsonl line (but ``step``) is in ``sent`` with the same value, under its
    TensorBoard tag."""
    numbers = {k: float(v) for k, v in line.items() if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)}
    want = {k: v for k, v in trackers.tracker_tags(numbers, trl_log_name, tracker="tensorboard").items()
            if k not in ignore}
    got = {k: v for k, v in sent.items() if k not in ignore}
    assert got == want and "train/reward" in got and "rlvr/train/loss" in got
    assert sent["rlvr/tracker/skipped_values"] == line["tracker/skipped_values"]
    assert line["tracker/skipped_values"] == sum(1 for k, v in line.items() if k != "step" and v is None)


# ----------------------------------------------------------------------------- each library, read back
@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """One 2-step run with all four trackers; W&B offline, trackio and MLflow in the test's folders."""
    root = tmp_path_factory.mktemp("tracked")
    (root / "lowercase_reward.py").write_text(LOWERCASE_REWARD)
    with pytest.MonkeyPatch.context() as mp:
        for var in ("WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
                    "MLFLOW_EXPERIMENT_ID", "TRACKIO_PROJECT", "TRACKIO_SPACE_ID"):
            mp.delenv(var, raising=False)
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):  # nothing written in $HOME
            mp.setenv(var, str(root / "wandb-home"))
        mp.setenv("TRACKIO_DIR", str(root / "trackio"))
        _point_trackio_at(mp, root / "trackio")
        cfg = build_config(tiny_overrides(root / "run", max_steps=2, reward_funcs=[f"{root}/lowercase_reward.py:lowercase_frac"],
                                          report_to="tensorboard,wandb,trackio,mlflow", run_name="tracked-run"))
        Trainer(cfg).train()
    run = root / "run"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2] and all(line["tracker/errors"] == 0 for line in lines)
    return run, cfg, lines, samples


def _point_trackio_at(mp, folder):
    """trackio reads TRACKIO_DIR when it is imported: point an already imported trackio there too."""
    utils = sys.modules.get("trackio.utils")
    if utils is not None:
        for module in [m for name, m in sys.modules.items() if name.startswith("trackio") and m is not None]:
            for attr, value in (("TRACKIO_DIR", folder), ("MEDIA_DIR", folder / "media")):
                if hasattr(module, attr):
                    mp.setattr(module, attr, value)


def _numbers_by_step(lines, tracker="tensorboard"):
    """Each step's finite numbers under ``tracker``'s tags (rlvr.run.trackers; tests/run/test_tracker_tags.py
    checks them against transformers' callbacks)."""
    return {line["step"]: trackers.tracker_tags({k: float(v) for k, v in line.items()
                                                 if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)},
                                                trl_log_name, tracker=tracker) for line in lines}


def _without_summary(got: dict, names: list[str]) -> dict:
    """``got`` (step -> values) without transformers' end-of-training values (``names``, at the last step only)."""
    last = max(got)
    assert set(names) <= set(got[last]) and not any(set(names) & set(got[step]) for step in got if step != last)
    return {step: {k: v for k, v in values.items() if k not in names} for step, values in got.items()}


def test_tensorboard_event_files_hold_every_metric_of_metrics_jsonl(tracked_run):
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, cfg, lines, samples = tracked_run
    events = EventAccumulator(str(run / "runs"), size_guidance={"scalars": 0, "tensors": 0})  # the default logging_dir
    events.Reload()
    got = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            got.setdefault(event.step, {})[tag] = event.value
    # TensorBoard stores float32: the value is metrics.jsonl's rounded to float32, exactly
    want = {step: {k: float(np.float32(v)) for k, v in numbers.items()} for step, numbers in _numbers_by_step(lines).items()}
    assert _without_summary(got, [trackers.rewrite_log_name(k) for k in TRL_SUMMARY if k != "epoch"]) == want
    texts = {e.step: e.tensor_proto.string_val[0].decode() for e in events.Tensors("samples/text_summary")}
    assert sorted(texts) == [1, 2]
    for row in samples:
        assert f"| {row['step']} | {row['group_id']} | {row['id']} |" in texts[row["step"]]
    (config,) = events.Tensors("config/text_summary")
    text = config.tensor_proto.string_val[0].decode()
    assert yaml.safe_load(text.removeprefix("```\n").removesuffix("```")) == cfg.to_dict()


def _wandb_records(path):
    """The records of a .wandb file: W&B's LevelDB-log framing (7-byte headers, 32 KiB blocks) of its protobufs.

    wandb >= 0.2x has no Python reader of its own; the records are decoded with wandb's own
    ``wandb_internal_pb2.Record``, the schema `wandb sync` uploads.
    """
    from wandb.proto import wandb_internal_pb2

    data, block, records, chunk = path.read_bytes(), 32768, [], b""
    position = 7  # the file header: "W&B" ident, magic, version
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        length, kind = int.from_bytes(data[position + 4:position + 6], "little"), data[position + 6]
        payload = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind == 0 and length == 0:
            continue
        chunk = payload if kind in (1, 2) else chunk + payload  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
    return records


def test_wandb_offline_run_holds_every_metric_of_metrics_jsonl(tracked_run):
    run, cfg, lines, samples = tracked_run
    (path,) = run.glob("wandb/offline-run-*/run-*.wandb")
    records = _wandb_records(path)
    history, config, names, summary = {}, {}, set(), {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(items.pop("_step"), {}).update(items)
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "run":
            names.add(record.run.display_name)
        elif kind == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update})
    assert names == {"tracked-run"}
    assert set(trackers.SINGLE_VALUE_SCALARS) <= set(summary)  # transformers' end-of-training values, as its callback
    # a history row: the step's numbers, W&B's own _runtime/_timestamp, and the table's reference (samples/...)
    got = {step: {k: v for k, v in row.items() if not k.startswith(("_", "samples/"))} for step, row in history.items()}
    assert all(row.pop("train/global_step") == step for step, row in got.items())  # transformers' step series
    assert got == _numbers_by_step(lines, "wandb")
    assert {k: config[k] for k in cfg.to_dict()} == cfg.to_dict()
    for step in (1, 2):
        table = {k.removeprefix("samples/"): v for k, v in history[step].items() if k.startswith("samples/")}
        assert table["_type"] == "table-file" and table["nrows"] == sum(r["step"] == step for r in samples)
        (file,) = path.parent.glob(f"files/{table['path']}")
        stored = json.loads(file.read_text())
        assert [dict(zip(stored["columns"], row)) for row in stored["data"]] == [r for r in samples if r["step"] == step]


def test_trackio_store_holds_every_metric_of_metrics_jsonl(tracked_run, monkeypatch):
    run, cfg, lines, samples = tracked_run
    monkeypatch.setenv("TRACKIO_DIR", str(run.parent / "trackio"))
    _point_trackio_at(monkeypatch, run.parent / "trackio")
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_project_db_path("rlvr") == run.parent / "trackio" / "rlvr.db"
    got = {}
    for log in SQLiteStorage.get_logs("rlvr", "tracked-run"):
        got.setdefault(log.pop("step"), {}).update({k: v for k, v in log.items() if k not in ("timestamp",)})
    tables = {step: row.pop("samples") for step, row in got.items()}
    assert all(row.pop("train/global_step") == step for step, row in got.items())
    assert got == _numbers_by_step(lines, "trackio")
    stored = SQLiteStorage.get_run_config("rlvr", "tracked-run")  # trackio adds its own _-keys
    assert {k: stored[k] for k in cfg.to_dict()} == cfg.to_dict()
    for step, table in tables.items():
        assert table["_type"] == "trackio.table"
        assert len(table["_value"]) == sum(r["step"] == step for r in samples)


def test_mlflow_run_holds_every_metric_of_metrics_jsonl(tracked_run):
    from mlflow.tracking import MlflowClient

    run, cfg, lines, samples = tracked_run
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")  # the default store
    experiment = client.get_experiment_by_name("rlvr")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "tracked-run"
    want = _numbers_by_step(lines, "mlflow")
    got = {}
    for key in found.data.metrics:
        for metric in client.get_metric_history(found.info.run_id, key):
            got.setdefault(metric.step, {})[key] = metric.value
    assert _without_summary(got, [k for k in TRL_SUMMARY if k != "epoch"]) == want
    assert "reward" in got[1] and "rlvr/train/loss" in got[1]  # transformers' MLflow names: TRL's as they are
    flat = {k: "null" if v is None else str(v) for k, v in cfg.flat().items()}
    assert found.data.params == flat
    table = client.load_table(experiment.experiment_id, "samples.json", run_ids=[found.info.run_id])
    records = table.to_dict("records")  # both steps, appended to one table
    assert len(records) == len(samples)
    for got, want in zip(records, samples, strict=True):
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, float):  # MLflow writes the table with pandas' to_json: 10 significant digits
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-10), key
            else:  # and pandas reads "-12" back as the number -12
                assert str(got[key]) == str(value), key


def test_a_resumed_run_may_turn_a_tracker_on_and_sends_the_steps_it_runs(tmp_path, monkeypatch):
    RECORDED.clear()
    monkeypatch.setitem(trackers.TRACKERS, "tensorboard", Recording)
    monkeypatch.setitem(trackers.TRACKER_PACKAGES, "tensorboard", ("json", "json"))
    Trainer(build_config(tiny_overrides(tmp_path / "run", max_steps=1, save_steps=1))).train()
    assert RECORDED == []  # report_to=none: no tracker
    Trainer(build_config(tiny_overrides(tmp_path / "run", max_steps=2, save_steps=1, resume=True,
                                        report_to="tensorboard"))).train()
    (tracker,) = RECORDED
    assert sorted(tracker.metrics) == [2] and tracker.config["run"]["report_to"] == ["tensorboard"]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "tracker/errors" not in lines[0] and lines[1]["tracker/errors"] == 0
