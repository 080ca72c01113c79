"""The trackers' tags are transformers': each tracker's rlvr client calls beside transformers' own callback for it.

For each of TensorBoard, W&B, trackio and MLflow, rlvr's tracker (its client library replaced by a fake module that
records the calls) is sent a metrics.jsonl line, and transformers' own callback (TensorBoardCallback, WandbCallback,
TrackioCallback, MLflowCallback, the same fake client) is sent the line TRL's ``Trainer.log`` would get for the
same values. What TRL logs must reach the client under the same names, at the same step, with the same values;
everything else rlvr sends must be under ``rlvr/``. The same for transformers' end-of-training line. The tag set
read back from a real TensorBoard event file, beside TRL's own trainer's, is
tests/conformance/test_trl_tracker_tags.py.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from rlvr.run import trackers
from rlvr.train.trl_metric_names import TRL_SUMMARY, trl_log_name

STEP = 7
GLOBAL = "train/global_step"
# a metrics.jsonl line: TRL's names, rlvr's own (some under train/, the tags TRL's dashboards read), an evaluation,
# a reward function's log_metric value, a name MLflow refuses characters of
LINE = {
    "step": 3, "reward": 0.5, "reward_std": 0.25, "rewards/accuracy_reward/mean": 0.5, "rewards/accuracy_reward/std": 0.1,
    "completions/mean_length": 12.0, "clip_ratio/region_mean": 0.0, "loss": -0.01, "grad_norm": 1.5,
    "learning_rate": 1e-6, "epoch": 0.5, "entropy": 2.0, "kl": 0.01, "num_tokens": 640.0,
    "train/loss": 0.02, "train/grad_norm": 1.4, "train/kl": 0.011, "train/entropy": 2.1, "train/lr": 1e-6,
    "rollout/reward_mean": 0.5, "rewards/accuracy_reward_mean": 0.5, "rewards/calls": 1.0, "time/step_s": 3.0,
    "eval/gsm8k-100/pass@1": 0.3, "reward_fn/format_hits": 0.75, "rewards/my(fn)/errors": 0.0,
}
SUMMARY = {"train_runtime": 12.5, "train_samples_per_second": 3.2, "train_steps_per_second": 0.4,
           "total_flos": 0.0, "train_loss": -0.01, "epoch": 0.5}


def trl_logs(line: dict) -> dict:
    """The dict TRL's Trainer.log gets for the same values (TRL's names; evaluation as eval_<x>)."""
    return {trl_log_name(k): v for k, v in line.items() if k != "step" and trl_log_name(k) is not None}


class Client:
    """A fake tracker library: records every call as (function, args, kwargs)."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []
        self.summary: dict = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs)) or self

    def of(self, name):
        return [(args, kwargs) for n, args, kwargs in self.calls if n == name]


def rlvr_sent(tracker: str, client: Client, monkeypatch, tmp_path) -> Client:
    """rlvr's tracker ``tracker`` on the fake ``client``: sent LINE, then the summary (``Trackers`` fan-out)."""
    if tracker == "tensorboard":
        import torch.utils.tensorboard

        monkeypatch.setattr(torch.utils.tensorboard, "SummaryWriter", lambda **kw: client)
    else:
        monkeypatch.setitem(sys.modules, tracker, client)
        client.run = client  # wandb.init / trackio.init return the run: here the same recorder
        client.init = lambda **kw: client
        client.config = client
        client.get_experiment_by_name = lambda name: None
    opened = trackers.TRACKERS[tracker](run_name="r", output_dir=tmp_path, logging_dir=tmp_path, config={})
    fan_out = trackers.Trackers({tracker: opened}, trl_log_name)
    fan_out.log_step(STEP, LINE, [])
    fan_out.log_summary(STEP, SUMMARY)
    return client


def transformers_sent(tracker: str, client: Client) -> Client:
    """transformers' own callback for ``tracker`` on the fake ``client``: on_log of TRL's line, then the summary."""
    from transformers.integrations import integration_utils as hf

    if tracker == "tensorboard":
        callback = hf.TensorBoardCallback(tb_writer=client)
    else:
        cls = {"wandb": hf.WandbCallback, "trackio": hf.TrackioCallback, "mlflow": hf.MLflowCallback}[tracker]
        callback = cls.__new__(cls)  # its __init__ only imports the library, which on_log reads from these:
        callback._wandb = callback._trackio = callback._ml_flow = client
        callback._initialized, callback._async_log, callback._auto_end_run = True, False, False
        client.run = client
    state = SimpleNamespace(global_step=STEP, is_world_process_zero=True)
    for logs in (trl_logs(LINE), dict(SUMMARY)):
        callback.on_log(None, state, None, logs=logs)
    return client


def metrics_of(tracker: str, client: Client) -> list[tuple[int, dict]]:
    """Each metrics call's (step, {name: value}), whatever the library's call looks like."""
    if tracker == "tensorboard":
        by_step: dict[int, dict] = {}
        for args, kwargs in client.of("add_scalar"):
            tag, value = args[0], args[1]
            step = kwargs.get("global_step", args[2] if len(args) > 2 else None)
            by_step.setdefault(step, {})[tag] = value
        return list(by_step.items())
    if tracker == "mlflow":
        return [(kw["step"], kw.get("metrics", args[0] if args else None)) for args, kw in client.of("log_metrics")]
    return [(kw.get("step"), args[0]) for args, kw in client.of("log")]


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb", "trackio", "mlflow"])
def test_what_trl_logs_reaches_each_tracker_under_transformers_names(tracker, monkeypatch, tmp_path):
    ours = metrics_of(tracker, rlvr_sent(tracker, Client(), monkeypatch, tmp_path))
    theirs = metrics_of(tracker, transformers_sent(tracker, Client()))
    assert len(ours) == len(theirs) == (1 if tracker == "tensorboard" else 2)  # TensorBoard: one step's scalars
    for (_, sent), (their_step, expected) in zip(ours, theirs, strict=True):
        trl_part = {k: v for k, v in sent.items() if not k.startswith(trackers.RLVR_PREFIX)}
        assert trl_part == expected  # the same names, the same values
        if tracker != "tensorboard":  # transformers passes no step (W&B, trackio) or global_step (MLflow)
            assert expected.get("train/global_step", STEP) == STEP and their_step in (None, STEP)
    own = {k for _, sent in ours for k in sent if k.startswith(trackers.RLVR_PREFIX)}
    name = (lambda key: trackers.mlflow_name(trackers.RLVR_PREFIX + key)) if tracker == "mlflow" else \
        (lambda key: trackers.RLVR_PREFIX + key)
    rlvr_keys = {k for k in LINE if k != "step" and trl_log_name(k) is None} | {"tracker/errors", "tracker/skipped_values"}
    assert own == {name(k) for k in rlvr_keys}  # every rlvr series, under rlvr/, and nothing else there
    assert {"train/loss", "train/grad_norm", "train/kl", "train/entropy"} <= rlvr_keys  # TRL's tags, not TRL's series


@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_wandb_and_trackio_get_tensorboards_tags_and_train_global_step(tracker, monkeypatch, tmp_path):
    board = metrics_of("tensorboard", rlvr_sent("tensorboard", Client(), monkeypatch, tmp_path))
    ours = metrics_of(tracker, rlvr_sent(tracker, Client(), monkeypatch, tmp_path))
    single = {trackers.rewrite_log_name(k) for k in trackers.SINGLE_VALUE_SCALARS}  # W&B: summary; trackio: dropped
    assert {k for _, sent in ours for k in sent} == ({k for _, sent in board for k in sent} - single) | {GLOBAL}
    assert all(step == sent["train/global_step"] == STEP for step, sent in ours)


def test_wandb_plots_against_train_global_step_and_keeps_the_summary_as_transformers_does(monkeypatch, tmp_path):
    ours = rlvr_sent("wandb", Client(), monkeypatch, tmp_path)
    assert ours.of("define_metric") == [(("train/global_step",), {}),
                                        (("*",), {"step_metric": "train/global_step", "step_sync": True})]
    theirs = transformers_sent("wandb", Client())
    assert ours.summary == theirs.summary == {k: SUMMARY[k] for k in trackers.SINGLE_VALUE_SCALARS}


def test_log_names_trl_tags_and_rlvr_prefix():
    assert trl_log_name("reward") == "reward" and trl_log_name("rewards/f/mean") == "rewards/f/mean"
    assert trl_log_name("rewards/f_mean") is None and trl_log_name("rewards/f/errors") is None
    assert trl_log_name("train/loss") is None and trl_log_name("rollout/accuracy") is None
    assert trl_log_name("eval/test/pass@1") == "eval_test/pass@1"
    assert trl_log_name("reward_fn/hits") == "hits" and trl_log_name("reward_fn/reward") is None
    assert all(trl_log_name(name) == name for name in TRL_SUMMARY)
    assert trackers.rewrite_log_name("eval_test/pass@1") == "eval/test/pass@1"
    assert trackers.mlflow_name("eval_test/pass@1") == "eval_test/pass_1"
