"""TRL's log (rlvr.train.trl_log) on hand-made units: which units log, and each entry's values as transformers'
``_maybe_log_save_evaluate`` and TRL's ``GRPOTrainer.log`` compute them (the arithmetic in the comments).
tests/conformance/test_trl_scripts.py and test_trl_training_step.py run TRL's own trainer beside it."""

import math

import pytest

from rlvr.train.metrics import TOKEN_SUMS, trl_update_metrics
from rlvr.train.run_plan import LoggingPlan
from rlvr.train.trl_log import LogUnit, TrlLog, split_line


def log(steps=2, strategy="steps", first=False, tokens=False) -> TrlLog:
    return TrlLog(LoggingPlan(strategy, steps, first, tokens, False), units=4,
                  train_metrics=lambda sums, **values: trl_update_metrics(sums, with_kl=False, **values))


def micro(*entropies) -> dict:
    """The update sums of micro-batches with these mean entropies (no clipping)."""
    return {**dict.fromkeys(TOKEN_SUMS, 0.0), "micro_batches": float(len(entropies)),
            "entropy_micro": float(sum(entropies)), "clip_extreme_micro": float(len(entropies))}


def unit(n, loss, grad_norm, lr, sums, values=None, epoch_end=False) -> LogUnit:
    return LogUnit(n, n, n / 4, epoch_end, loss, grad_norm, lr, sums, values or {})


def test_an_entry_averages_the_interval_as_trl_and_transformers_do():
    trl = log(steps=2)
    # optimiser step 1 generated (reward, num_tokens: once), steps 1 and 2 each two micro-batches and a step_time
    assert trl.add(unit(1, 0.2, 1.0, 1e-3, micro(1.0, 2.0), {"reward": 1.0, "num_tokens": 10.0, "step_time": 0.5})) is None
    entry = trl.add(unit(2, 0.4, 2.0, 5e-4, micro(3.0, 4.0), {"step_time": 0.7}))
    assert entry["loss"] == pytest.approx(0.3)  # (0.2 + 0.4) / 2 optimiser steps
    assert (entry["grad_norm"], entry["learning_rate"]) == (2.0, 5e-4)  # the last optimiser step's
    assert entry["entropy"] == pytest.approx(2.5)  # (1 + 2 + 3 + 4) / 4 micro-batches
    assert entry["step_time"] == pytest.approx(0.6) and entry["reward"] == 1.0 and entry["num_tokens"] == 10.0
    assert (entry["epoch"], entry["step"]) == (0.5, 2) and trl.entries == [entry]


def test_a_metric_nothing_appended_to_is_absent_and_nan_is_left_out():
    trl = log(steps=1)
    first = trl.add(unit(1, 0.1, 1.0, 1e-3, micro(1.0), {"reward": None, "rewards/f/std": 0.5, "step_time": 0.1}))
    second = trl.add(unit(2, 0.1, 1.0, 1e-3, micro(1.0), {"step_time": 0.1}))  # an optimiser step that did not generate
    assert first["reward"] is None and first["rewards/f/std"] == 0.5  # only NaN appended: None (TRL's log)
    assert "reward" not in second and "rewards/f/std" not in second and second["entropy"] == 1.0


def test_which_units_log():
    trl = log(steps=3, first=True)
    logged = [trl.add(unit(n, 0.0, 1.0, 1e-3, micro(1.0))) is not None for n in range(1, 8)]
    assert logged == [True, False, True, False, False, True, False]  # logging_first_step, then every 3rd
    trl = log(strategy="epoch")
    logged = [trl.add(unit(n, 0.0, 1.0, 1e-3, micro(1.0), epoch_end=n in (2, 3))) is not None for n in (1, 2, 3)]
    assert logged == [False, True, True]  # each epoch's end (the run's last step ends one)
    trl = log(strategy="no")
    assert all(trl.add(unit(n, 0.0, 1.0, 1e-3, micro(1.0), epoch_end=True)) is None for n in (1, 2))


def test_the_summary_holds_what_was_appended_since_the_last_entry():
    trl = log(steps=2, tokens=True)
    trl.start(counter=0, global_step=0, epoch=0.0, tokens=0)
    for n, loss in ((1, 0.2), (2, 0.4), (3, 0.6)):
        trl.add(unit(n, loss, 1.0, 1e-3, micro(float(n)), {"num_tokens": 10.0 * n, "reward": float(n)}))
    summary = trl.summary(samples_per_step=4, memory={"train_mem_cpu_alloc_delta": 7})
    assert summary["train_loss"] == pytest.approx(0.4)  # (0.2 + 0.4 + 0.6) / 3 optimiser steps
    assert summary["reward"] == 3.0 and summary["entropy"] == 3.0  # step 3's, not yet logged (TRL's log adds them)
    assert summary["total_flos"] == 0.0 and summary["train_mem_cpu_alloc_delta"] == 7
    assert (summary["epoch"], summary["num_input_tokens_seen"]) == (0.75, 30)
    assert trl.summary_entry == {**summary, "step": 3} and trl.history == [*trl.entries, trl.summary_entry]
    assert {"train_runtime", "train_tokens_per_second", "num_input_tokens_seen"} <= set(trl.entries[0])


def test_a_resumed_log_starts_its_interval_at_the_checkpoint():
    trl = log(steps=2)
    trl.restore([{"loss": 1.0, "step": 2}, {"eval_loss": 0.5, "step": 2}])  # evaluations are kept apart
    trl.start(counter=2, global_step=2, epoch=0.5, tokens=20)
    entry = trl.add(unit(3, 0.3, 1.0, 1e-3, micro(1.0)))
    assert entry is None and trl.add(unit(4, 0.5, 1.0, 1e-3, micro(1.0)))["loss"] == pytest.approx(0.4)
    assert [e["step"] for e in trl.entries] == [2, 4]
    summary = trl.summary(samples_per_step=4, memory={})
    assert summary["train_loss"] == pytest.approx(0.4)  # this train() call's optimiser steps only


def test_split_line_puts_a_generations_metrics_apart_under_trls_names():
    line = {"step": 1, "reward": 0.5, "completions/mean_length": 3.0, "num_tokens": 9.0, "reward_fn/x": 2.0,
            "entropy": 1.0, "loss": 0.1, "step_time": 0.2, "epoch": 0.25, "rollout/accuracy": 1.0, "eval/reward": 0.3}
    generation, every = split_line(line, {"loss", "entropy"})
    assert generation == {"reward": 0.5, "completions/mean_length": 3.0, "num_tokens": 9.0, "x": 2.0}
    assert every == {"step_time": 0.2} and not math.isnan(every["step_time"])
