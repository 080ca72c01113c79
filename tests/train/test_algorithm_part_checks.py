"""A researcher's own estimator, loss or aggregation that returns the wrong thing or raises: one line naming the
option, the file:function and what was expected, at start-up (the probe on a synthetic batch: compile_plan and
--dry-run) and in a step (rlvr.train.algorithm_part_checks); the user's own exception keeps the user's frames."""

from __future__ import annotations

import subprocess

import pytest
import torch

from rlvr.config import build_config
from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, AdvantageSettings
from rlvr.core.losses import AGGREGATIONS, POLICY_LOSSES
from rlvr.train.algorithm_part_checks import AlgorithmPartError
from rlvr.train.plan import compile_plan
from tests.run.cli_runs import ENV
from tests.train.test_algorithm_parts import ALTERNATING, restore_registries, tiny_command  # noqa: F401 (fixture)

PARTS = '''import math
import torch


def grpo_like(inputs, settings):
    return inputs.rewards - inputs.rewards.mean()


def wrong_shape(inputs, settings):
    return inputs.rewards.unsqueeze(-1)


def a_list(inputs, settings):
    return [0.0] * len(inputs.rewards)


def integers(inputs, settings):
    return (inputs.rewards > 0.5).long()


def not_finite(inputs, settings):
    return inputs.rewards / 0.0


def raises(inputs, settings):
    table = {}
    return table["baseline"]


CALLS = []


def fails_in_the_second_step(inputs, settings):
    CALLS.append(1)
    if len(CALLS) == 3:  # once probed at start-up, once in step 1
        raise ZeroDivisionError("no baseline at step 2")
    return inputs.rewards - inputs.rewards.mean()


def scalar_loss(logprobs, old_logprobs, advantages, mask, settings):
    return -(logprobs * advantages[:, None]).mean(), torch.zeros_like(mask)


def detached_loss(logprobs, old_logprobs, advantages, mask, settings):
    return -(logprobs.detach() * advantages[:, None]), torch.zeros_like(mask)


def float_clipped(logprobs, old_logprobs, advantages, mask, settings):
    return -(logprobs * advantages[:, None]), torch.zeros_like(logprobs)


def one_tensor(logprobs, old_logprobs, advantages, mask, settings):
    return -(logprobs * advantages[:, None])


def per_token_aggregation(per_token, mask, denominators):
    return per_token * mask


def number_aggregation(per_token, mask, denominators):
    return float((per_token * mask).sum().detach())
'''


@pytest.fixture
def parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parts.py").write_text(PARTS)
    return tmp_path / "parts.py"


@pytest.mark.parametrize(("option", "function", "expected"), [
    ("advantage_estimator", "wrong_shape", r"returned a tensor of shape \[16, 1\]; expected \[16\]"),
    ("advantage_estimator", "a_list", r"returned a list; expected fn\(inputs, settings\) -> advantages \[N\]"),
    ("advantage_estimator", "integers", r"returned a torch.int64 tensor; expected a floating-point one"),
    ("advantage_estimator", "not_finite", r"returned \d+ non-finite advantage\(s\)"),
    ("policy_loss", "scalar_loss", r"returned a loss of shape \[\]; expected the per-token loss \[16, 4\]"),
    ("policy_loss", "detached_loss", r"returned a loss without gradient; it must be computed from `logprobs`"),
    ("policy_loss", "float_clipped", r"returned clipped as a torch.float32 tensor of shape \[16, 4\]; expected a bool"),
    ("policy_loss", "one_tensor", r"returned a tensor of shape \[16, 4\]; expected fn\(logprobs, .*\) -> \(loss"),
    ("loss_type", "per_token_aggregation", r"returned a tensor of shape \[16, 4\]; expected a scalar \(0-d\) loss"),
    ("loss_type", "number_aggregation", r"returned a float; expected fn\(per_token, mask, denominators\)"),
])
def test_a_wrong_return_is_refused_at_start_up_naming_the_option(parts, option, function, expected):
    cfg = build_config({"model": "tiny-random", "num_generations": 8, option: f"parts.py:{function}"})
    with pytest.raises(AlgorithmPartError, match=f"^{option}=parts.py:{function} {expected}") as caught:
        compile_plan(cfg)
    assert "\n" not in str(caught.value)  # one line
    assert str(caught.value).endswith("(probed on a synthetic batch of 2 groups of 8 responses, 4 tokens each)")


def test_the_users_own_exception_is_theirs_with_their_frame(parts):
    cfg = build_config({"model": "tiny-random", "advantage_estimator": "parts.py:raises"})
    with pytest.raises(AlgorithmPartError) as caught:
        compile_plan(cfg)
    first, *frames = str(caught.value).splitlines()
    assert first.startswith("advantage_estimator=parts.py:raises raised KeyError: 'baseline' (an error in your "
                            "function, not in the config)")
    assert frames[0] == f'  File "{parts}", line 27, in raises'
    assert frames[1].strip() == 'return table["baseline"]'
    assert isinstance(caught.value.__cause__, KeyError)


def test_a_good_part_passes_the_checks_and_its_value_is_unchanged(parts):
    compile_plan(build_config({"model": "tiny-random", "advantage_estimator": "parts.py:grpo_like"}))
    wrapped = ADVANTAGE_ESTIMATORS["parts.py:grpo_like"]
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    out = wrapped(AdvantageInputs(rewards, torch.tensor([0, 0, 1, 1])), AdvantageSettings())
    assert torch.equal(out, rewards - rewards.mean())
    # the built-ins are called unwrapped (no cost to them)
    for registry in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, AGGREGATIONS):
        assert not any(hasattr(fn, "checked_part") for name, fn in registry.items() if ":" not in name)


def test_the_dry_run_shows_the_users_frame_and_no_traceback(parts):
    (parts.parent / "alternating.py").write_text(ALTERNATING)
    done = subprocess.run([*tiny_command(parts.parent / "run", "advantage_estimator=parts.py:raises"), "--dry-run"],
                          check=False, cwd=parts.parent, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "rlvr train: advantage_estimator=parts.py:raises raised KeyError: 'baseline'" in done.stderr
    assert f'File "{parts}", line 27, in raises' in done.stderr


@pytest.mark.slow
def test_a_part_failing_in_the_second_step_stops_the_run_with_one_line(parts):
    """The probe and step 1 pass; step 2's call raises: exit 2, the line names it, no traceback; and a wrong arity
    from a real run (not a dry run) is the same one line (it was a TypeError with an 11-frame traceback)."""
    (parts.parent / "alternating.py").write_text(ALTERNATING)
    run = parts.parent / "run"
    done = subprocess.run([*tiny_command(run, "advantage_estimator=parts.py:fails_in_the_second_step"),
                           "max_steps=2"], check=False, cwd=parts.parent, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert ("rlvr train: advantage_estimator=parts.py:fails_in_the_second_step raised ZeroDivisionError: no baseline "
            "at step 2 (an error in your function, not in the config)") in done.stderr
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1  # step 1 ran and was logged
    (parts.parent / "arity.py").write_text("def three(a, b, c):\n    return a\n")
    done = subprocess.run(tiny_command(parts.parent / "run2", "policy_loss=arity.py:three"), check=False,
                          cwd=parts.parent, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "rlvr train: policy_loss=arity.py:three takes three(a, b, c), expected fn(logprobs" in done.stderr
