"""The option tests (tests/options/) catch plausible one-line bugs that the rest of the suite let through.

Each case copies src/rlvr, plants one bug in the copy (a weight inverted, a filter's quantifier swapped, an option the
plan or the TRL API drops, a sandbox failure scored as a fail) and runs the tests that should catch it on the copy:
they must fail, and only they are run. The last test runs the same tests on an unplanted copy: they pass there, so
each failure is the plant's. docs/design/option_tests.md lists these bugs beside the tests that catch them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.helpers.package_copy import copy_package, failed_tests, plant, run_tests_on_copy

DAGRPO = "tests/options/test_dagrpo_options.py::"
TAGRPO = "tests/options/test_tagrpo_options.py::"
REWARD = "tests/options/test_reward_options.py::"
TRL_API = "tests/options/test_trl_api_options.py::"


@dataclass(frozen=True)
class Plant:
    name: str
    path: str  # under src/rlvr
    old: str  # occurs exactly once there
    new: str
    tests: tuple[str, ...]  # the node ids that must catch it


PLANTS = [
    # DaGRPO's score mixing weight: s = α·r + (1−α)·q written with α and 1 − α swapped (every other test uses α = 0.5)
    Plant("score-alpha-swapped", "train/dagrpo.py", "alpha * group.rewards[i] + (1 - alpha) * q",
          "(1 - alpha) * group.rewards[i] + alpha * q",
          (DAGRPO + "test_score_alpha_weighs_the_reward_and_the_fine_grained_score",)),
    # TA-GRPO pools under dynamic sampling: a pool dropped as soon as one of its variant groups is uniform
    Plant("pool-filter-any", "train/rollout_phase.py", "if not all(g.uniform for g in pool)",
          "if not any(g.uniform for g in pool)",
          (TAGRPO + "test_dynamic_sampling_keeps_whole_unpooled_pools_with_a_mixed_variant_group",)),
    # ... or pools cut apart: each variant group taken as its own pool
    Plant("pools-split", "train/rollout_phase.py", "out[-1][0].pool == group.pool",
          "out[-1][0].group_id == group.group_id",
          (TAGRPO + "test_dynamic_sampling_keeps_whole_unpooled_pools_with_a_mixed_variant_group",)),
    # train(resume_from_checkpoint="<path>") resuming the newest checkpoint instead of the one named
    Plant("resume-path-ignored", "trl_api/trainer.py",
          'extra = {"resume": True} if resume is True else {"resume_from_checkpoint": str(resume)}',
          'extra = {"resume": True}', (TRL_API + "test_resume_from_checkpoint_true_or_a_path",)),
    # train(resume_from_checkpoint=False) taken as "resume" (a None check where False means no)
    Plant("resume-false-taken", "trl_api/trainer.py",
          "self._built(resume_from_checkpoint if resume_from_checkpoint not in (None, False) else None)",
          "self._built(True if resume_from_checkpoint is not None else None)",
          (TRL_API + "test_resume_from_checkpoint_false_or_none_starts_a_fresh_run",)),
    # a code reward scoring a sandbox failure (the worker, not the program) 0.0 instead of None
    Plant("sandbox-error-scored-zero", "rewards/code_rewards.py", 'if "sandbox_error" in kinds:\n            return None',
          'if "sandbox_error" in kinds:\n            return 0.0',
          (REWARD + "test_code_and_binary_code_score_each_way_a_program_ends",)),
    Plant("code-check-sandbox-error-scored", "rewards/code_rewards.py",
          "None if outcome.sandbox_error else float(outcome.completed)", "float(outcome.completed)",
          (REWARD + "test_code_check_scores_each_way_a_program_ends",)),
    # a time-out scored as one failed case (0.5 of two cases) instead of making the completion 0.0
    Plant("time-limit-as-a-failed-case", "rewards/code_rewards.py", 'if "time_limit" in kinds or not kinds:',
          "if not kinds:", (REWARD + "test_code_and_binary_code_score_each_way_a_program_ends",)),
    # the plan dropping DaGRPO options: the default written in the option's place
    Plant("plan-drops-anchor-max-correct", "train/plan.py", "anchor_max_correct=d.anchor_max_correct",
          "anchor_max_correct=0", (DAGRPO + "test_the_plan_carries_every_dagrpo_step_option",
                                   DAGRPO + "test_anchors_and_anchor_max_correct_choose_the_groups")),
    Plant("plan-drops-score-alpha", "train/plan.py", "score_alpha=d.score_alpha", "score_alpha=0.5",
          (DAGRPO + "test_the_plan_carries_every_dagrpo_step_option",
           DAGRPO + "test_score_alpha_weighs_the_reward_and_the_fine_grained_score")),
    Plant("plan-drops-anchor-in-stats", "train/plan.py", "anchor_in_stats=d.anchor_in_stats,", "anchor_in_stats=True,",
          (DAGRPO + "test_the_plan_carries_every_dagrpo_step_option", DAGRPO + "test_anchor_in_stats")),
    Plant("plan-drops-placement-and-overlong", "train/plan.py",
          "anchor_placement=d.anchor_placement, anchor_overlong=d.anchor_overlong",
          'anchor_placement="replace_worst", anchor_overlong="truncate"',
          (DAGRPO + "test_the_plan_carries_every_dagrpo_step_option", DAGRPO + "test_anchor_placement",
           DAGRPO + "test_anchor_overlong")),
    Plant("plan-drops-tau-kappa", "train/plan.py", "tau_kappa=d.pair_tau_kappa if d.pair_masking else None",
          "tau_kappa=None", (DAGRPO + "test_the_plan_carries_every_dagrpo_step_option",
                             DAGRPO + "test_pair_masking_and_its_threshold")),
    # the anchor trigger inverted: at least κ correct instead of at most
    Plant("anchor-trigger-inverted", "train/dagrpo.py", "num_correct <= s.anchor_max_correct",
          "num_correct >= s.anchor_max_correct", (DAGRPO + "test_anchors_and_anchor_max_correct_choose_the_groups",)),
]


@pytest.mark.slow
@pytest.mark.parametrize("bug", PLANTS, ids=lambda bug: bug.name)
def test_a_planted_bug_fails_the_option_tests(tmp_path, bug):
    src = copy_package(tmp_path)
    plant(src, bug.path, bug.old, bug.new)
    done = run_tests_on_copy(src, *bug.tests)  # (-x: the first test that catches it stops the run)
    failed = failed_tests(done)
    assert done.returncode == 1 and failed, f"{bug.tests} passed with the bug planted:\n{done.stdout[-3000:]}"
    assert all(node.split("[")[0] in bug.tests for node in failed), failed


@pytest.mark.slow
def test_the_same_tests_pass_on_an_unplanted_copy(tmp_path):
    tests = sorted({test for bug in PLANTS for test in bug.tests})
    done = run_tests_on_copy(copy_package(tmp_path), *tests)
    assert done.returncode == 0, done.stdout[-3000:]
