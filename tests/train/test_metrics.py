"""metrics.py: gradient-spike counting, memory and phase timings, the rollout/, dagrpo/ and TRL update metrics,
sample records and the TRL name table, each on hand examples (TRL's completion metrics: test_trl_metrics.py)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch

import rlvr.train.metrics as metrics_module
from rlvr.rollout import Completion
from rlvr.train.metrics import (
    MIN_HISTORY,
    WINDOW,
    GradSpikes,
    PhaseTimer,
    dagrpo_rollout_metrics,
    memory_metrics,
    rollout_metrics,
    sample_records,
    step_metrics,
    trl_update_metrics,
)
from rlvr.train.rollout_phase import Group
from rlvr.train.trl_metric_names import TRL_METRICS, metrics_table


def _group(gid: int, rewards: list[float], lengths: list[int], *, anchors=(), truncated=(), **fields) -> Group:
    completions = [Completion(list(range(n)), [0.0] * n, truncated=i in truncated, is_anchor=i in anchors)
                   for i, n in enumerate(lengths)]
    return Group(group_id=gid, row={"id": f"r{gid}", "prompt": f"q{gid}", "answer": str(gid)}, prompt_ids=[1],
                 completions=completions, texts=[f"t{gid}.{i}" for i in range(len(rewards))], rewards=list(rewards),
                 **fields)


def test_grad_spikes_need_history_then_compare_with_the_running_median():
    """No verdict before MIN_HISTORY norms; then a norm above factor × median of the earlier ones is a spike (equal
    to it is not); a step without a norm changes nothing."""
    spikes = GradSpikes(factor=2.0)
    assert MIN_HISTORY == 5
    verdicts = [spikes.update(norm)["train/grad_norm_spike"] for norm in (1.0, 1.0, 1.0, 1.0, 100.0)]
    assert verdicts == [0] * 5  # 100 came before five norms were known
    # history [1, 1, 1, 1, 100]: median 1, so 2.0 is not > 2 × 1 and 2.5 is
    assert spikes.update(2.0) == {"train/grad_norm_spike": 0, "train/grad_norm_spikes": 0}
    assert spikes.update(2.5) == {"train/grad_norm_spike": 1, "train/grad_norm_spikes": 1}
    assert spikes.update(None) == {"train/grad_norm_spike": 0, "train/grad_norm_spikes": 1}
    assert len(spikes.history) == 7


def test_grad_spikes_state_round_trips_and_keeps_a_window():
    """A restored counter gives the verdict the original would (resume), and the median looks back WINDOW steps."""
    spikes = GradSpikes(factor=3.0)
    for norm in [10.0] * (WINDOW + 20):
        spikes.update(norm)
    assert len(spikes.history) == WINDOW
    spikes.update(40.0)  # 40 > 3 × 10
    restored = GradSpikes(factor=3.0)
    restored.load_state_dict(spikes.state_dict())
    assert restored.total == spikes.total == 1 and restored.history == spikes.history
    assert restored.update(31.0) == spikes.update(31.0) == {"train/grad_norm_spike": 1, "train/grad_norm_spikes": 2}


def test_memory_metrics_on_cpu_report_the_peak_rss_in_gib():
    """On CPU only the process's peak RSS, in GiB: a Python process with torch loaded holds tens of MiB at least,
    and far less than a TiB (Linux's KiB divided by 2**20, not bytes or MiB)."""
    out = memory_metrics(torch.device("cpu"))
    assert set(out) == {"perf/max_rss_gb"}
    assert 0.02 < out["perf/max_rss_gb"] < 1024


def test_phase_timer_sums_each_phase_and_the_whole_step(monkeypatch):
    """time/<phase>_s adds up every interval of a phase; time/score_s only when scoring is on; time/step_s spans
    the timer's life."""
    clock = iter([0.0, 1.0, 3.0, 10.0, 10.5, 20.0, 24.0])
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    timer = PhaseTimer()  # t = 0
    with timer("rollout"):  # 1 → 3
        pass
    with timer("rollout"):  # 10 → 10.5
        pass
    with pytest.raises(RuntimeError), timer("update"):  # 20 → 24, counted though the phase raised
        raise RuntimeError
    assert timer.seconds == {"rollout": 2.5, "reward": 0.0, "score": 0.0, "update": 4.0}
    clock = iter([30.0, 31.0])
    assert timer.metrics(with_score=False) == {"time/rollout_s": 2.5, "time/reward_s": 0.0, "time/update_s": 4.0,
                                               "time/step_s": 30.0}
    assert timer.metrics(with_score=True)["time/score_s"] == 0.0


def _rollout():
    # group 1: response 3 is an anchor (not the policy's), response 2 unrewarded (every function gave None) and
    # truncated; group 2: two wrong responses
    first = _group(1, [1.0, 0.0, 0.0, 1.0], [2, 4, 6, 3], anchors=(3,), truncated=(2,),
                   rewarded=[True, True, False, True], reward_parts={"acc": [1.0, 0.0, None, 1.0]})
    second = _group(2, [0.0, 0.0], [5, 5], reward_parts={"acc": [0.0, 0.0]})
    counts = {"rewards/calls": 2.0, "reward_fn/len#sum": 3.0, "reward_fn/len#n": 2.0}
    return SimpleNamespace(generated=[first, second], kept=[first], rounds=2, reward_counts=counts, dagrpo_counts=None)


def test_rollout_metrics_by_hand():
    """Over the policy's responses only (the anchor is out): rewards of the rewarded ones [1, 0, 0, 0], accuracy
    over all five (1 correct), lengths [2, 4, 6, 5, 5]; log_metric sums become their mean, raw counters pass."""
    m = rollout_metrics(_rollout(), ["acc"])
    assert m["rollout/reward_mean"] == pytest.approx(0.25)
    assert m["rollout/reward_std"] == pytest.approx(0.5)  # unbiased: sqrt((0.75² + 3 × 0.25²) / 3)
    assert m["rollout/frac_uniform_groups"] == 0.5  # group 2's [0, 0]
    assert (m["rollout/frac_all_correct"], m["rollout/frac_all_wrong"]) == (0.0, 0.5)
    assert m["rollout/accuracy"] == pytest.approx(0.2)
    assert (m["rollout/response_len_mean"], m["rollout/response_len_max"]) == (pytest.approx(4.4), 6)
    assert m["rollout/truncated_frac"] == pytest.approx(0.2)
    assert (m["rollout/num_gen_batches"], m["rollout/kept_groups"]) == (2, 1)
    assert m["rewards/acc_mean"] == pytest.approx(0.25)  # 1, 0, 0, 0: the None left out
    assert m["rewards/calls"] == 2.0 and m["reward_fn/len"] == 1.5
    assert not any(key.startswith(("reward_fn/len#", "dagrpo/", "tagrpo/")) for key in m)


def test_step_metrics_is_one_line_of_every_part():
    """step_metrics joins the step number, the rollout metrics, the advantage and train metrics as given, and
    TA-GRPO's prompt gap."""
    line = step_metrics(7, _rollout(), {"dagrpo/zero_adv_frac": 0.5}, {"train/loss": 1.25}, reward_names=["acc"],
                        tagrpo=False, prompt_gap=0.125)
    assert line["step"] == 7 and line["dagrpo/zero_adv_frac"] == 0.5 and line["train/loss"] == 1.25
    assert line["tagrpo/anchor_logp_gap"] == 0.125 and line["rollout/reward_mean"] == pytest.approx(0.25)


def test_dagrpo_rollout_metrics_are_rates_of_the_counters():
    """Anchor rate per group, the anchors' mean reward, and the scorer's failure rate and mean over what it scored;
    None where nothing was counted, and no keys at all when DaGRPO is off."""
    counts = Counter(groups=4, anchor_injected=2, anchor_reward_sum=1.5, anchor_unavailable=1, scored=10,
                     scorer_failed=2, score_sum=4.0)
    assert dagrpo_rollout_metrics(counts) == pytest.approx({
        "dagrpo/anchor_rate": 0.5, "dagrpo/anchor_unavailable": 1.0, "dagrpo/anchor_truncated": 0.0,
        "dagrpo/anchor_reward_mean": 0.75, "dagrpo/scorer_fail_frac": 0.2, "dagrpo/score_mean": 0.5})
    empty = dagrpo_rollout_metrics(Counter())
    assert empty["dagrpo/anchor_rate"] == 0.0
    assert empty["dagrpo/anchor_reward_mean"] is empty["dagrpo/scorer_fail_frac"] is empty["dagrpo/score_mean"] is None
    assert dagrpo_rollout_metrics(None) == {}


def test_sample_records_spread_over_the_step_with_their_advantages():
    """count records at a stride of len // count over the flat responses; each carries the advantage at its flat
    position, its row's fields and its log_extra columns (none for an anchor)."""
    groups = [_group(g, [0.5, 1.0], [1, 2], anchors=(1,) if g == 2 else (), reward_extras={"note": [f"a{g}", f"b{g}"]})
              for g in (1, 2, 3)]
    advantages = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    records = sample_records(9, groups, advantages, 3)  # stride 2: flat positions 0, 2, 4
    assert [(r["group_id"], r["completion"]) for r in records] == [(1, "t1.0"), (2, "t2.0"), (3, "t3.0")]
    assert [r["advantage"] for r in records] == pytest.approx([0.1, 0.3, 0.5])
    assert records[0] == {"step": 9, "group_id": 1, "id": "r1", "prompt": "q1", "answer": "1", "completion": "t1.0",
                          "reward": 0.5, "advantage": pytest.approx(0.1), "truncated": False, "anchor": False,
                          "variant": 0, "extra": {"note": "a1"}}
    four = sample_records(9, groups, None, 4)  # stride 1: the first four, no advantages
    assert [r["completion"] for r in four] == ["t1.0", "t1.1", "t2.0", "t2.1"]
    assert four[3]["anchor"] is True and "extra" not in four[3] and four[3]["advantage"] is None
    assert sample_records(9, groups, advantages, 0) == [] and sample_records(9, [], None, 3) == []


def test_trl_update_metrics_average_the_micro_batch_means():
    """entropy, kl and the clip fractions are sums of micro-batch means over the micro-batch count; kl only with a
    reference; None for all of them when no micro-batch ran; loss, grad_norm and the rate pass through."""
    sums = {"micro_batches": 4.0, "entropy_micro": 6.0, "kl_micro": 0.2, "clip_low_micro": 0.4,
            "clip_high_micro": 0.8, "clip_region_micro": 1.2, "clip_low_min_micro": 0.0, "clip_high_max_micro": 2.0,
            "clip_extreme_micro": 4.0}
    m = trl_update_metrics(sums, with_kl=True, loss=0.3, grad_norm=1.5, learning_rate=1e-6)
    assert m == pytest.approx({"loss": 0.3, "grad_norm": 1.5, "learning_rate": 1e-6, "entropy": 1.5, "kl": 0.05,
                               "clip_ratio/low_mean": 0.1, "clip_ratio/high_mean": 0.2, "clip_ratio/region_mean": 0.3,
                               "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.5})
    assert "kl" not in trl_update_metrics(sums, with_kl=False, loss=0.3, grad_norm=1.5, learning_rate=1e-6)
    # two of the four micro-batches had no trained row: TRL's NaN is left out of the mean, as its logger does
    fewer = trl_update_metrics({**sums, "clip_extreme_micro": 2.0}, with_kl=True, loss=0.3, grad_norm=1.5,
                               learning_rate=1e-6)
    assert fewer["clip_ratio/high_max"] == pytest.approx(1.0) and fewer["clip_ratio/low_mean"] == pytest.approx(0.1)
    none = trl_update_metrics({}, with_kl=True, loss=None, grad_norm=None, learning_rate=2e-6)
    assert none["learning_rate"] == 2e-6 and none["entropy"] is none["kl"] is none["clip_ratio/region_mean"] is None


def test_metrics_table_has_one_row_per_trl_name_and_a_dash_for_none():
    """Header, separator, then one row per TRL_METRICS entry in order; rlvr's name in backticks, '—' when it has
    none."""
    lines = metrics_table().splitlines()
    assert len(lines) == 2 + len(TRL_METRICS) and lines[1] == "|---|---|---|"
    rows = dict(zip(TRL_METRICS, lines[2:]))
    assert rows["reward"] == "| `reward` | mean weighted reward over the scored completions | `rollout/reward_mean` |"
    assert rows["num_tokens"].endswith("| — |") and "`-`" not in metrics_table()
