"""TRL's metric names: docs/from_trl.md's table is the code's, and the completion metrics on a hand example.

That they equal what TRL's own code logs is tests/conformance/test_trl_advantages.py's and test_trl_loss.py's.
"""

from pathlib import Path

import pytest

from rlvr.rollout import Completion
from rlvr.train.metrics import trl_rollout_metrics
from rlvr.train.rollout_phase import Group
from rlvr.train.trl_metric_names import TRL_METRICS, metrics_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "from_trl.md"
START = "<!-- generated: rlvr.train.trl_metric_names.metrics_table(); tests/train/test_trl_metrics.py keeps it equal -->\n"


def test_the_documented_table_is_the_code_s():
    text = DOC.read_text(encoding="utf-8")
    generated = text.split(START, 1)[1].split("<!-- end generated -->", 1)[0]
    assert generated.strip() == metrics_table().strip(), "regenerate docs/from_trl.md's table from metrics_table()"
    assert len(TRL_METRICS) >= 25


def _group(gid: int, rewards: list[float], lengths: list[int], truncated: list[bool]) -> Group:
    completions = [Completion(list(range(n)), [0.0] * n, truncated=t) for n, t in zip(lengths, truncated)]
    return Group(group_id=gid, row={"id": str(gid)}, prompt_ids=[1, 2], completions=completions,
                 texts=[""] * len(rewards), rewards=rewards, reward_parts={"acc": list(rewards)})


def test_completion_and_reward_metrics_by_hand():
    # group 1: rewards 1, 0 (std 0.7071), lengths 3 (ended) and 5 (truncated); group 2: 1, 1 (std 0), 2 and 4
    groups = [_group(1, [1.0, 0.0], [3, 5], [False, True]), _group(2, [1.0, 1.0], [2, 4], [False, False])]
    m = trl_rollout_metrics(groups, ["acc"], scale_rewards="group")
    assert m["reward"] == pytest.approx(0.75)  # (1 + 0 + 1 + 1) / 4
    assert m["reward_std"] == pytest.approx(0.5)  # unbiased std of [1, 0, 1, 1]
    assert m["frac_reward_zero_std"] == 0.5  # group 2's two completions of four
    assert (m["completions/mean_length"], m["completions/min_length"], m["completions/max_length"]) == (3.5, 2.0, 5.0)
    assert m["completions/clipped_ratio"] == 0.25
    assert m["completions/mean_terminated_length"] == pytest.approx(3.0)  # 3, 2, 4
    assert (m["rewards/acc/mean"], m["rewards/acc/std"]) == (pytest.approx(0.75), pytest.approx(0.5))
    # scale_rewards=batch: TRL's zero-std flag is the batch's (0.5 > 0: none)
    assert trl_rollout_metrics(groups, ["acc"], scale_rewards="batch")["frac_reward_zero_std"] == 0.0
