"""`rlvr report --group-seeds --smooth W`: one line per arm (mean over seeds, min-max band), smoothed
curves; report.md keeps a row per run. Numbers are checked against values worked out by hand."""

import json

import pytest

from rlvr.cli import main
from rlvr.report.groups import group_evals, group_of, group_runs, smooth, smooth_runs
from rlvr.report.load import Series, load_evals, load_runs
from rlvr.report.plots import render_panels

from .conftest import base_config, eval_result, write_base_eval, write_run


def _records(rewards: dict[int, float], grad: float) -> list[dict]:
    return [{"step": s, "rollout/reward_mean": r, "rollout/reward_std": 0.1, "train/grad_norm": grad,
             "rollout/response_len_mean": 10.0 * s} for s, r in rewards.items()]


@pytest.fixture
def seeds(tmp_path):
    """grpo/seed0, grpo/seed1 (seed1 stopped after step 3), dagrpo-seed0 alone; an eval file each."""
    root = tmp_path / "runs"
    made = {}
    for name, rewards, grad, passk in [
        ("grpo/seed0", {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}, 1.0, {"1": 0.2, "4": 0.5}),
        ("grpo/seed1", {1: 0.3, 2: 0.0, 3: 0.6}, 3.0, {"1": 0.4, "4": 0.7}),
        ("dagrpo-seed0", {1: 0.5, 2: 0.5}, 2.0, {"1": 0.9, "4": 0.95}),
    ]:
        made[name] = write_run(root, name, _records(rewards, grad), base_config("grpo", root / name),
                               evals={"final.json": eval_result(str(root / name), passk)})
    return made


def test_group_names_drop_a_trailing_seed_only():
    assert group_of("grpo/seed0") == group_of("grpo-seed12") == group_of("grpo_seed1") == "grpo"
    assert group_of("seed3") == "seed3"  # nothing left: the name stays
    assert group_of("grpo/seed0/extra") == "grpo/seed0/extra"
    assert group_of("myseed1") == "myseed1"


def test_smoothing_is_a_trailing_mean():
    assert smooth(Series((1, 2, 3, 5), (1.0, 3.0, 5.0, 9.0)), 2).values == pytest.approx((1.0, 2.0, 4.0, 7.0))
    assert smooth(Series((1, 2, 3), (1.0, 3.0, 5.0)), 5).values == pytest.approx((1.0, 2.0, 3.0))


def test_groups_are_means_over_seeds_at_common_steps_with_min_max_band(seeds):
    runs = load_runs(list(seeds.values()), list(seeds))
    grouped = {r.name: r for r in group_runs(runs)}
    assert list(grouped) == ["grpo", "dagrpo-seed0"]  # a group of one keeps its run and name
    grpo = grouped["grpo"]
    assert grpo.members == ["grpo/seed0", "grpo/seed1"]
    reward = grpo.get("rollout/reward_mean")
    assert reward.steps == (1, 2, 3)  # step 4 only in seed0: left out
    assert reward.values == pytest.approx((0.2, 0.1, 0.45))
    steps, low, high = grpo.bands["rollout/reward_mean"]
    assert steps == (1, 2, 3) and low == pytest.approx((0.1, 0.0, 0.3)) and high == pytest.approx((0.3, 0.2, 0.6))
    assert grouped["dagrpo-seed0"] is runs[2] and not runs[2].bands


def test_smoothing_leaves_grad_norm_raw(seeds):
    runs = smooth_runs(load_runs([seeds["grpo/seed0"]]), 2)
    assert runs[0].get("rollout/reward_mean").values == pytest.approx((0.1, 0.15, 0.25, 0.35))
    assert runs[0].get("train/grad_norm").values == (1.0, 1.0, 1.0, 1.0)


def test_grouped_evals_and_plots_draw_the_means(seeds, tmp_path):
    runs = load_runs(list(seeds.values()), list(seeds))
    evals = load_evals(runs, [f"base={write_base_eval(tmp_path)}"])
    grouped_evals = {e.label: e for e in group_evals(evals, runs)}
    assert set(grouped_evals) == {"base", "grpo", "dagrpo-seed0"}
    grpo = grouped_evals["grpo"].datasets["gsm8k-100"]
    assert grpo["pass@k"] == pytest.approx({1: 0.3, 4: 0.6})
    assert grpo["pass@k_band"] == {1: (0.2, 0.4), 4: (0.5, 0.7)}
    drawn, _ = render_panels(group_runs(runs), list(grouped_evals.values()), tmp_path / "out")
    assert drawn["reward"].lines["grpo"] == ((1.0, 2.0, 3.0), pytest.approx((0.2, 0.1, 0.45)))
    assert drawn["reward"].extra["bands"]["grpo"][2] == pytest.approx((0.3, 0.2, 0.6))
    assert drawn["reward"].extra["bands"]["dagrpo-seed0"][1] == pytest.approx((0.4, 0.4))  # alone: ± std
    passk = drawn["pass_at_k"].lines
    assert passk["grpo: gsm8k-100"] == ((1.0, 4.0), pytest.approx((0.3, 0.6)))
    assert passk["base: math500"][1] == (0.2, 0.4, 0.6)
    assert set(drawn["pass_at_k"].legend) == {"base", "grpo", "dagrpo-seed0"}


def test_cli_report_groups_plots_but_keeps_a_row_per_run(seeds, tmp_path, capsys):
    out = tmp_path / "report"
    args = ["report", *map(str, seeds.values()), "--names", ",".join(seeds), "--out", str(out),
            "--group-seeds", "--smooth", "2", "--eval", f"base={write_base_eval(tmp_path)}"]
    assert main(args) == 0
    text = (out / "report.md").read_text()
    for name in seeds:
        assert f"| {name} |" in text
    assert "grpo = grpo/seed0 + grpo/seed1" in text
    assert "trailing mean over 2 logged steps" in text
    assert "--group-seeds --smooth 2" in text
    assert "| base |" in text  # the eval table labels the extra file as given
    assert main(["report", str(seeds["grpo/seed0"]), "--out", str(out), "--smooth", "0"]) == 2
    assert "--smooth 0" in capsys.readouterr().err


def test_eval_name_syntax_does_not_break_plain_paths(tmp_path):
    from rlvr.report.load import split_eval_name

    odd = tmp_path / "a=b.json"
    odd.write_text(json.dumps(eval_result("m", {"1": 0.5})))
    assert split_eval_name(str(odd)) == (str(odd), None)  # an existing path is a path
    assert split_eval_name("base=x/eval.json") == ("x/eval.json", "base")
    assert split_eval_name("dir/a=b.json") == ("dir/a=b.json", None)
