"""The generated contract suites catch plausible bugs: each planted in a copy of src/rlvr
(tests/helpers/package_copy.py), the suite run on the copy in a fresh interpreter must fail, on a test whose id
names the planted addition. A control run first: the same copy with a correct addition passes all three suites,
so each failure below is the bug's, and a contributor who follows the checklist gets a passing suite.

- (a) an estimator added as "Add an advantage estimator" says, a median baseline declaring its float64 reference
  (r − the group's lower median), whose implementation subtracts the group mean;
- (b) CISPO with the stop-gradient on its capped ratio dropped (same value, wrong gradient);
- (c) dapo given its own function that divides by the number of sequences instead of TRL's token count.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.package_copy import append, copy_package, failed_tests, plant, run_tests_on_copy

ESTIMATOR_SUITE = "tests/contracts/test_estimator_contract.py"
LOSS_SUITE = "tests/contracts/test_loss_contract.py"
AGGREGATION_SUITE = "tests/contracts/test_aggregation_contract.py"

MEDIAN_BASELINE = '''


def _median_baseline_reference(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
    """float64, one response at a time: r_i minus the lower median of its group's rewards."""
    rewards, ids = inputs.rewards.double().tolist(), inputs.group_ids.tolist()
    out = []
    for i, gid in enumerate(ids):
        group = sorted(r for r, g in zip(rewards, ids, strict=True) if g == gid)
        out.append(rewards[i] - group[(len(group) - 1) // 2])
    return torch.tensor(out, dtype=torch.float64)


@register_advantage("median_baseline", reference=_median_baseline_reference,
                    invariants=("shift_invariant", "permutation_equivariant", "uniform_group_zero", "singleton_zero"))
def median_baseline(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
    """A_i = r_i − median_g r, the group's lower median (torch.median's); no scaling."""
    rewards = inputs.rewards.to(torch.float64)  # [N]
    baseline = torch.empty_like(rewards)  # [N]
    for gid in torch.unique(inputs.group_ids):
        rows = inputs.group_ids == gid
        baseline[rows] = rewards[rows].median()
    return (rewards - baseline).to(_out_dtype(inputs.rewards))
'''

DAPO_OWN_FUNCTION = '''


@register_aggregation("dapo", reference=references.token_mean)
def _dapo(per_token, m, d: Denominators):
    """TRL's dapo: Σ m·ℓ / TRL's token normaliser (the planted bug: divided by the sequences instead)."""
    return (per_token * m).sum() / _at_least_one(per_token.shape[0] if d.num_sequences is None else d.num_sequences,
                                                 per_token)
'''


def _fails_on(done: subprocess.CompletedProcess, addition: str, message: str) -> None:
    """The suite failed (pytest's exit status 1: tests failed, not a usage or collection error), and every failed
    test's id names ``addition``, with ``message`` in the failure."""
    failed = failed_tests(done)
    assert done.returncode == 1, f"expected failing tests, got exit status {done.returncode}:\n{done.stdout[-3000:]}"
    assert failed and all(addition in test_id for test_id in failed), failed
    assert message in done.stdout, done.stdout[-3000:]


@pytest.mark.slow
def test_a_correct_addition_passes_every_suite(tmp_path):
    src = copy_package(tmp_path)
    append(src, "core/advantages.py", MEDIAN_BASELINE)
    done = run_tests_on_copy(src, ESTIMATOR_SUITE, LOSS_SUITE, AGGREGATION_SUITE, "-rA")  # -rA: passed ones listed
    assert done.returncode == 0, done.stdout[-3000:]
    passed = "PASSED tests/contracts/test_estimator_contract.py::test_matches_its_reference[median_baseline"
    assert passed in done.stdout  # the addition was checked, not skipped


@pytest.mark.slow
def test_a_mean_instead_of_the_median_fails_the_estimator_suite(tmp_path):
    src = copy_package(tmp_path)
    append(src, "core/advantages.py", MEDIAN_BASELINE.replace("rewards[rows].median()", "rewards[rows].mean()"))
    _fails_on(run_tests_on_copy(src, ESTIMATOR_SUITE), "median_baseline", "differs from its declared reference")


@pytest.mark.slow
def test_cispo_without_its_stop_gradient_fails_the_loss_suite(tmp_path):
    src = copy_package(tmp_path)
    plant(src, "core/loss_variants.py", ".clamp(max=s.epsilon if s.epsilon_high is None else s.epsilon_high).detach()",
          ".clamp(max=s.epsilon if s.epsilon_high is None else s.epsilon_high)")
    _fails_on(run_tests_on_copy(src, LOSS_SUITE), "cispo", "the gradient w.r.t. logprobs differs from its reference's")


@pytest.mark.slow
def test_dapo_divided_by_the_sequences_fails_the_aggregation_suite(tmp_path):
    src = copy_package(tmp_path)
    plant(src, "core/losses.py", '@register_aggregation("dapo", reference=references.token_mean)\n', "")
    append(src, "core/losses.py", DAPO_OWN_FUNCTION)
    _fails_on(run_tests_on_copy(src, AGGREGATION_SUITE), "dapo", "dapo differs from its declared reference")
