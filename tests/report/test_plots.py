"""Each panel writes a real PNG and draws the runs' own numbers; panels without data are skipped."""

import statistics

import pytest

from rlvr.report.load import load_evals, load_runs
from rlvr.report.plots import PANELS, render_panels

from .conftest import (
    BASE_EVAL,
    GRPO_EVAL,
    GRPO_RECORDS,
    PNG_HEADER,
    dagrpo_records,
    make_runs,
    write_base_eval,
)


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("report") / "out"


@pytest.fixture(scope="module")
def rendered(out_dir):
    """The three synthetic runs and an extra eval file, drawn once for this module."""
    runs = make_runs(out_dir.parent / "runs")
    loaded = load_runs([runs["grpo"], runs["dagrpo"], runs["tagrpo"]])
    evals = load_evals(loaded, [write_base_eval(out_dir.parent)])
    return render_panels(loaded, evals, out_dir)


def _column(records, key):
    rows = sorted((r for r in records if r.get(key) is not None), key=lambda r: r["step"])
    return tuple(float(r["step"]) for r in rows), tuple(r[key] for r in rows)


def test_every_panel_with_data_is_a_real_png(rendered, out_dir):
    drawn, skipped = rendered
    assert skipped == []
    assert set(drawn) == set(PANELS)
    for name, result in drawn.items():
        assert result.path == out_dir / PANELS[name].file
        data = result.path.read_bytes()
        assert data[:8] == PNG_HEADER, name
        assert len(data) > 10_000, (name, len(data))


def test_reward_line_and_band_are_the_runs_numbers(rendered):
    drawn, _ = rendered
    lines = drawn["reward"].lines
    assert list(lines) == ["grpo", "dagrpo", "tagrpo"]
    assert drawn["reward"].legend == ["grpo", "dagrpo", "tagrpo"]
    assert lines["grpo"] == _column(GRPO_RECORDS, "rollout/reward_mean")
    assert lines["dagrpo"] == ((1.0, 2.0, 3.0), (0.2, 0.3, 0.35))  # written out of order
    steps, low, high = drawn["reward"].extra["bands"]["grpo"]
    assert steps == (1, 3, 4)  # std is null at step 2: no band point there
    assert low == pytest.approx((0.10 - 0.30, 0.40 - 0.45, 0.50 - 0.5))
    assert high == pytest.approx((0.10 + 0.30, 0.40 + 0.45, 0.50 + 0.5))


def test_uniform_panel_splits_tagrpo_into_per_variant_and_pooled(rendered):
    drawn, _ = rendered
    lines = drawn["uniform_groups"].lines
    assert list(lines) == ["grpo", "dagrpo", "tagrpo (per-variant)", "tagrpo (pooled)"]
    assert lines["grpo"] == _column(GRPO_RECORDS, "rollout/frac_uniform_groups")
    assert lines["tagrpo (per-variant)"] == ((1.0, 2.0), (0.8, 0.6))
    assert lines["tagrpo (pooled)"] == ((1.0, 2.0), (0.5, 0.25))


def test_grad_norm_marks_the_flagged_spikes(rendered):
    drawn, _ = rendered
    result = drawn["grad_norm"]
    assert result.lines["grpo"] == _column(GRPO_RECORDS, "train/grad_norm")
    assert result.extra["spikes"] == {"grpo": ((3.0,), (7.5,))}
    assert result.legend == ["grpo", "dagrpo", "tagrpo", "spike"]


def test_kl_and_dagrpo_panels_draw_only_runs_with_values(rendered):
    drawn, _ = rendered
    assert drawn["kl"].lines == {"dagrpo": ((1.0, 2.0), (0.01, 0.02))}
    assert drawn["masked_pairs"].lines == {"dagrpo": _column(dagrpo_records(), "dagrpo/masked_pair_frac")}
    assert drawn["anchor_rate"].lines == {"dagrpo": ((1.0, 2.0, 3.0), (1.0, 0.5, 0.25))}
    assert drawn["response_length"].lines == {"grpo": _column(GRPO_RECORDS, "rollout/response_len_mean")}
    assert drawn["entropy"].lines == {"grpo": _column(GRPO_RECORDS, "train/entropy")}
    assert drawn["loss"].lines == {"grpo": _column(GRPO_RECORDS, "train/loss")}
    assert drawn["eval_during_training"].lines == {"grpo: gsm8k-100/pass@1": ((2.0, 4.0), (0.25, 0.375))}


def test_passk_panel_draws_the_eval_files_numbers(rendered):
    drawn, _ = rendered
    lines = drawn["pass_at_k"].lines
    grpo = GRPO_EVAL["datasets"]["gsm8k-100"]["pass@k"]
    base = BASE_EVAL["datasets"]["math500"]["pass@k"]
    assert lines == {
        "grpo: gsm8k-100": (tuple(float(k) for k in grpo), tuple(grpo.values())),
        "base: math500": (tuple(float(k) for k in base), tuple(base.values())),
    }


def test_time_panel_bars_are_mean_seconds_per_phase(rendered):
    drawn, _ = rendered
    bars = drawn["time"].extra["bars"]
    assert bars["grpo"] == pytest.approx({
        "rollout": statistics.fmean([2.0, 4.0, 3.0, 3.0]), "reward": 0.5, "update": 1.0,
        "other": statistics.fmean([3.6, 5.6, 4.6, 4.6]) - (3.0 + 0.5 + 1.0)})
    assert bars["dagrpo"] == pytest.approx({"rollout": 1.0, "score": 2.0, "update": 1.0})  # no "other": 0
    assert bars["tagrpo"] == pytest.approx({"other": 2.0})
    assert drawn["time"].legend == ["rollout", "reward", "score", "update", "other"]


def test_a_single_run_without_optional_metrics_skips_those_panels(runs, tmp_path):
    drawn, skipped = render_panels(load_runs([runs["tagrpo"]]), [], tmp_path / "out")
    assert set(drawn) == {"reward", "uniform_groups", "grad_norm", "time"}
    assert set(skipped) == set(PANELS) - set(drawn)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(PANELS[n].file for n in drawn)
