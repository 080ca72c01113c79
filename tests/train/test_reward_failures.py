"""Reward failures are loud: a function that cannot work stops the run with its name and exception;
unrewarded completions are out of the statistics; columns reach reward functions under their names."""

import json
import subprocess
import sys
import time

import pytest
import torch

from rlvr.cli import main
from rlvr.config import build_config
from rlvr.rollout import Completion
from rlvr.train.experience import Experience, compute_advantages
from rlvr.train.plan import compile_plan
from rlvr.train.rewarding import RewardFunctionFailed
from rlvr.train.rollout_phase import Group
from rlvr.train.trainer import Trainer

from .conftest import tiny_overrides

FAILING_REWARDS = '''
import json, os

def always_raises(prompts, completions, **columns):
    raise TypeError("missing 'solution'")

def fails_from_call(prompts, completions, **columns):
    """Works for the first FAIL_FROM - 1 calls, raises after (counts its calls in a file)."""
    path = os.environ["RLVR_TEST_CALLS"]
    calls = (json.load(open(path)) if os.path.exists(path) else 0) + 1
    json.dump(calls, open(path, "w"))
    if calls >= int(os.environ["RLVR_TEST_FAIL_FROM"]):
        raise RuntimeError(f"backend down at call {calls}")
    return [float(len(c) % 2) for c in completions]

def none_for_odd(prompts, completions, **columns):
    return [None if len(c) % 2 else 1.0 for c in completions]

def sleeps(prompts, completions, **columns):
    import time
    time.sleep(60)
    return [1.0] * len(completions)

def exits(prompts, completions, **columns):
    import sys
    sys.exit(5)

def huge(prompts, completions, **columns):
    return [1e308 if i % 2 else 0.5 for i in range(len(completions))]

def echo_columns(prompts, completions, solution, answer, **columns):
    """1.0 where TRL's `solution` column arrived and equals the gold rlvr read from it."""
    return [float(s == a == "7") for s, a in zip(solution, answer)]
'''


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "failing_rewards.py"
    path.write_text(FAILING_REWARDS)
    return str(path)


def test_a_reward_that_always_raises_stops_the_run_at_step_1(tmp_path, rewards_file):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:always_raises"], max_steps=3))
    trainer = Trainer(cfg)
    with pytest.raises(RewardFunctionFailed, match=r"step 1: reward function 'always_raises' failed at every call "
                                                   r"of the first step \(TypeError: missing 'solution'\)"):
        trainer.train()
    assert trainer.metrics_log.read() == []  # nothing trained on a reward that never worked


def test_cli_exits_non_zero_with_the_functions_message(tmp_path, rewards_file, capsys):
    code = main(["train", "model=tiny-random", "data=rg:basic_arithmetic:size=16", "max_steps=2",
                 "prompts_per_step=2", "num_generations=2", "max_completion_length=4", "progress_bar=false",
                 "verifier_workers=1", f"output_dir={tmp_path / 'cli'}", f"reward_funcs={rewards_file}:always_raises"])
    assert code == 3
    err = capsys.readouterr().err
    assert "reward function 'always_raises' failed at every call" in err and "TypeError: missing 'solution'" in err


def test_a_reward_that_starts_failing_stops_the_run_once_most_calls_fail(tmp_path, rewards_file, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_CALLS", str(tmp_path / "calls.json"))
    monkeypatch.setenv("RLVR_TEST_FAIL_FROM", "2")  # step 1 works, then every call fails
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:fails_from_call"], max_steps=6))
    trainer = Trainer(cfg)
    # step 2: 1 of 2 calls failed (not more than 0.5); step 3: 2 of 3 > 0.5
    with pytest.raises(RewardFunctionFailed, match=r"step 3: reward function 'fails_from_call' failed at 2 of its "
                                                   r"3 calls .*backend down at call 3"):
        trainer.train()
    logged = trainer.metrics_log.read()
    assert [m["rewards/fails_from_call/errors"] for m in logged] == [0.0, 1.0]
    assert all(m["rewards/calls"] == 1.0 for m in logged)


def test_max_reward_error_frac_one_never_stops(tmp_path, rewards_file, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_CALLS", str(tmp_path / "calls.json"))
    monkeypatch.setenv("RLVR_TEST_FAIL_FROM", "2")
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:fails_from_call"], max_steps=3,
                                      max_reward_error_frac=1.0))
    history = Trainer(cfg).train()
    assert [m["rewards/fails_from_call/errors"] for m in history] == [0.0, 1.0, 1.0]


def test_user_reward_means_are_logged_under_the_functions_name(tmp_path, lowercase_reward):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[lowercase_reward, "format"], max_steps=1))
    (metrics,) = Trainer(cfg).train()
    assert metrics["rewards/lowercase_frac_mean"] is not None and 0 <= metrics["rewards/lowercase_frac_mean"] <= 1
    assert metrics["rewards/format_mean"] == 0.0  # tiny-random never boxes


def test_a_short_solution_read_as_the_gold_still_reaches_reward_functions(tmp_path, rewards_file):
    data = tmp_path / "trl_style.jsonl"  # TRL's math datasets: a chat prompt and a short `solution`
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is 3 + {k}?"}],
                                        "solution": "7"}) + "\n" for k in range(4)))
    cfg = build_config(tiny_overrides(tmp_path / "r", data=str(data), reward_funcs=[f"{rewards_file}:echo_columns"],
                                      max_steps=1))
    (metrics,) = Trainer(cfg).train()
    assert metrics["rewards/echo_columns_mean"] == 1.0 and metrics["rewards/echo_columns/errors"] == 0.0


def _group(gid, rewards, rewarded):
    return Group(group_id=gid, row={"id": str(gid)}, prompt_ids=[1],
                 completions=[Completion([2], [0.0], False) for _ in rewards], texts=[""] * len(rewards),
                 rewards=list(rewards), rewarded=list(rewarded))


def test_unscorable_completions_are_out_of_the_statistics_and_get_zero_advantage():
    # group 1: rewards [1, 0, (0: unrewarded), 1] -> statistics over [1, 0, 1]: mean 2/3,
    # unbiased std sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = 0.57735; A = [0.57735, -1.1547, 0, 0.57735]
    # group 2: every completion unrewarded -> all 0
    groups = [_group(1, [1.0, 0.0, 0.0, 1.0], [True, True, False, True]), _group(2, [0.0, 0.0], [False, False])]
    exp = Experience.from_groups(groups)
    adv, _ = compute_advantages(compile_plan(build_config({"model": "tiny-random"})).advantages, exp)
    torch.testing.assert_close(adv, torch.tensor([0.57735, -1.1547, 0.0, 0.57735, 0.0, 0.0]), atol=1e-4, rtol=0)
    assert groups[1].uniform and not groups[0].uniform  # no rewarded value: no signal


def test_none_rewards_make_completions_unscorable_in_a_run(tmp_path, rewards_file):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:none_for_odd"], max_steps=1,
                                      num_completions_to_log=16))
    trainer = Trainer(cfg)
    (metrics,) = trainer.train()
    assert metrics["rewards/all_none"] > 0
    samples = [json.loads(x) for x in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    odd = [s for s in samples if len(s["completion"]) % 2]
    assert odd and all(s["advantage"] == 0.0 for s in odd)


@pytest.mark.slow
def test_trl_accuracy_reward_on_a_trl_chat_dataset(tmp_path):
    """TRL's own reward function, unchanged, on a TRL-style dataset (chat prompts, short `solution`)."""
    pytest.importorskip("trl", reason="TRL is in the dev extra: make setup installs it")
    # two worked turns, so SmolLM2-135M answers in the LaTeX that accuracy_reward parses (\boxed{N})
    shots = [{"role": "user", "content": "What is 1 + 2?"}, {"role": "assistant", "content": "\\boxed{3}"},
             {"role": "user", "content": "What is 4 + 1?"}, {"role": "assistant", "content": "\\boxed{5}"}]
    rows = [{"prompt": [*shots, {"role": "user", "content": f"What is {a} + {b}?"}], "solution": str(a + b)}
            for a, b in [(2, 3), (4, 4), (1, 6), (5, 2)]]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    command = [sys.executable, "-m", "rlvr.cli", "train", f"data={data}", "reward_funcs=trl.rewards:accuracy_reward",
               "max_steps=1", "prompts_per_step=4", "num_generations=8", "max_completion_length=12",
               "instruction=null", "progress_bar=false", f"output_dir={out}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (metrics,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["rewards/accuracy_reward/errors"] == 0.0
    assert metrics["rewards/accuracy_reward_mean"] > 0


def test_a_dataset_of_prose_golds_gets_one_warning_at_start_up(caplog):
    from rlvr.train.rewarding import Rewarder
    rewarder = Rewarder(["accuracy"], None, verifier_workers=1, verifier_timeout=5.0, answer_extraction="boxed")
    prose = [{"answer": a} for a in ("Yes", "No", "Exactly one", "The function is increasing", "12")]
    numbers = [{"answer": str(k)} for k in range(20)] + [{"answer": "\\frac{1}{2}"}, {"answer": "No"}]
    try:
        with caplog.at_level("WARNING", logger="rlvr.train.rewarding"):
            assert rewarder.check_golds(prose, "prose.jsonl") == {"math": 1, "text": 4}
            assert rewarder.check_golds(numbers, "numbers.jsonl") == {"math": 21, "text": 1}
    finally:
        rewarder.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "4 of 5 golds of prose.jsonl are not math" in warnings[0]
    assert "text_compared" in warnings[0]
    custom = Rewarder(["format"], None, verifier_workers=1, verifier_timeout=5.0, answer_extraction="boxed")
    assert custom.check_golds(prose, "prose.jsonl") == {}  # no verifier reward: nothing to warn about
    custom.close()


def test_a_reward_that_hangs_is_cut_off_by_reward_timeout(tmp_path, rewards_file):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:sleeps"], max_steps=2,
                                      reward_timeout=1.0))
    trainer = Trainer(cfg)
    started = time.monotonic()
    with pytest.raises(RewardFunctionFailed, match=r"'sleeps' failed at every call .*TimeoutError: did not return "
                                                   r"within reward_timeout=1 s"):
        trainer.train()
    assert time.monotonic() - started < 50  # not the function's 60 s


def test_sys_exit_in_a_reward_function_is_contained_and_named(tmp_path, rewards_file):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:exits"], max_steps=2))
    with pytest.raises(RewardFunctionFailed, match=r"'exits' failed at every call .*\(SystemExit: 5\)"):
        Trainer(cfg).train()


def test_absurd_reward_values_are_dropped_not_summed(tmp_path, rewards_file):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:huge"], max_steps=1))
    (metrics,) = Trainer(cfg).train()
    assert metrics["rewards/huge/nonfinite"] == 8 and metrics["rewards/all_none"] == 8  # half of 4 x 4
    assert metrics["rollout/reward_mean"] == 0.5


def test_the_accuracy_rewards_own_failures_are_not_hidden_by_its_verifier_counters():
    from rlvr.train.rewarding import Rewarder
    rewarder = Rewarder(["accuracy"], None, verifier_workers=1, verifier_timeout=5.0, answer_extraction="boxed")
    try:  # a row without `answer`: the accuracy function raises; that is a failed call, counted as such
        _, _, stats = rewarder.reward_texts([{"id": "a", "prompt": "q"}], [["\\boxed{1}"]])
    finally:
        rewarder.close()
    assert stats["rewards/accuracy/errors"] == 1.0 and stats["rewards/accuracy/verifier_errors"] == 0.0


def test_the_end_of_run_summary_names_what_went_wrong(tmp_path, rewards_file, capsys):
    cfg = build_config(tiny_overrides(tmp_path / "r", reward_funcs=[f"{rewards_file}:huge"], max_steps=1))
    Trainer(cfg).train()
    out = capsys.readouterr().out
    assert "rlvr: look at metrics.jsonl: " in out and "huge: 8 non-finite values" in out
    assert "8 unrewarded completions" in out
