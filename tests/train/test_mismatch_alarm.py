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


class OffsetLogprobs(ShiftedLogprobs):
    """The engine the trainer builds, reporting every token 2 nats likelier than it is (π_old/π_sampler = e^-2)."""

    def generate(self, prompts, **kwargs):
        completions = self.engine.generate(prompts, **kwargs)
        for c in completions:
            c.logprobs[:] = [value + 2.0 for value in c.logprobs]
        return completions


def test_the_correction_masking_most_tokens_raises_the_alarm(tmp_path, monkeypatch, caplog):
    """The IS weights' spread: with the correction on (token_mask, C_min 0.5) every ratio e^-2 is outside its bounds,
    so rollout/is_clipped_frac is 1 > IS_ADJUSTED_WARN; with logprob_mismatch_warn above the 2-nat gap, that alone sets
    the alarm and warns, naming the engine. The right engine under the same correction masks nothing: no alarm."""
    correction = {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_mask",
                  "vllm_importance_sampling_clip_min": 0.5, "logprob_mismatch_warn": 5.0}
    with caplog.at_level(logging.WARNING, logger="rlvr.train.metrics"):
        Trainer(_cfg(tmp_path / "right", **correction)).train()
    line = _lines(tmp_path / "right")[0]
    assert line["rollout/is_clipped_frac"] == 0.0 and line["rollout/logprob_mismatch_alarm"] == 0
    assert not caplog.records
    build_engine = train_setup.build_engine
    monkeypatch.setattr(train_setup, "build_engine", lambda *a, **kw: OffsetLogprobs(build_engine(*a, **kw)))
    with caplog.at_level(logging.WARNING, logger="rlvr.train.metrics"):
        Trainer(_cfg(tmp_path / "offset", **correction)).train()
    line = _lines(tmp_path / "offset")[0]
    assert line["rollout/logprob_mismatch"] == pytest.approx(2.0, abs=1e-3)  # below its own threshold, 5
    assert line["rollout/is_clipped_frac"] == 1.0 and line["rollout/logprob_mismatch_alarm"] == 1, line
    (record,) = caplog.records
    assert "is_clipped_frac" in record.getMessage() and "rollout_engine=rlvr" in record.getMessage()


@pytest.mark.parametrize(("mismatch", "adjusted", "warn", "expected"), [
    (0.05, 0.4, 0.1, 0), (0.05, 0.6, 0.1, 1), (0.2, 0.0, 0.1, 1), (None, 0.6, 0.1, 1), (0.05, None, 0.1, 0),
    (3.0, 0.9, 0.0, None),  # logprob_mismatch_warn=0 turns the alarm off, both halves
])
def test_the_alarm_fires_on_either_signal_above_its_threshold(mismatch, adjusted, warn, expected):
    from rlvr.train.metrics import IS_ADJUSTED_WARN, MismatchAlarm

    assert IS_ADJUSTED_WARN == 0.5  # docs/training.md states this value
    out = MismatchAlarm((warn, None), engine="rlvr").check(3, mismatch, adjusted)
    assert out == ({} if expected is None else {"rollout/logprob_mismatch_alarm": expected})
