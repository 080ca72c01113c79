"""The sampler/trainer gap's alarm (rlvr.train.metrics.MismatchAlarm) on the real trainer: an engine whose log-probs are
one position off (a plausible engine bug) trains with a large rollout/logprob_mismatch; the run says so at that
step (a warning naming the engine and the usual causes, rollout/logprob_mismatch_alarm = 1) and, with
max_logprob_mismatch, stops. The right engine raises no alarm."""

import json
import logging

import pytest

import rlvr.train.setup as train_setup
from rlvr.config import build_config
from rlvr.run.stopping import TrainingStopped
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides


class ShiftedLogprobs:
    """The engine the trainer builds, its log-probs rotated by one position (each token gets its neighbour's)."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, **kwargs):
        completions = self.engine.generate(prompts, **kwargs)
        for c in completions:
            c.logprobs[:] = c.logprobs[1:] + c.logprobs[:1]
        return completions


def _lines(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _cfg(out, **extra):
    return build_config(tiny_overrides(out, reward_funcs=["accuracy"], max_steps=1, **extra))


def test_the_right_engine_raises_no_alarm(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.train.metrics"):
        Trainer(_cfg(tmp_path / "run")).train()
    line = _lines(tmp_path / "run")[0]
    assert line["rollout/logprob_mismatch"] < 1e-3 and line["rollout/logprob_mismatch_alarm"] == 0
    assert not caplog.records


def test_an_engine_with_shifted_log_probs_is_named_and_can_stop_the_run(tmp_path, monkeypatch, caplog):
    build_engine = train_setup.build_engine
    monkeypatch.setattr(train_setup, "build_engine", lambda *a, **kw: ShiftedLogprobs(build_engine(*a, **kw)))
    with caplog.at_level(logging.WARNING, logger="rlvr.train.metrics"):
        Trainer(_cfg(tmp_path / "warned")).train()
    line = _lines(tmp_path / "warned")[0]
    assert line["rollout/logprob_mismatch"] > 0.1 and line["rollout/logprob_mismatch_alarm"] == 1, line
    (record,) = caplog.records
    assert "rollout_engine=rlvr" in record.getMessage() and "weights not synchronised" in record.getMessage()
    limit = round(line["rollout/logprob_mismatch"] / 2, 3)
    with pytest.raises(TrainingStopped, match=f"Stopped: max_logprob_mismatch={limit}"):
        Trainer(_cfg(tmp_path / "stopped", max_logprob_mismatch=limit)).train()
