"""The engine contract suite catches a plausible one-line bug: planted in a copy of the package, the suite run
against the copy fails, naming the engine.

The bug: rlvr's decode engine (the default ``rollout_engine``) hands back each row's sampling log-probs shifted by
one position (token t gets the log-prob of token t - 1), which lengths, stops and seeds do not see.
"""

from __future__ import annotations

import dataclasses

import pytest

from rlvr.config.sections import RolloutConfig
from tests.helpers.package_copy import copy_package, failed_tests, plant, run_tests_on_copy

SUITE = "tests/contracts/test_engine_contract.py"
DEFAULT_ENGINE = {f.name: f.default for f in dataclasses.fields(RolloutConfig)}["rollout_engine"]


@pytest.mark.slow
def test_logprobs_shifted_by_one_position_fail_the_suite_naming_the_engine(tmp_path):
    assert DEFAULT_ENGINE == "rlvr", "the bug below is planted in rlvr's decode engine: plant it in the default one"
    src = copy_package(tmp_path)
    plant(src, "rollout/decode_engine.py", "self.logprobs[targets] = state.logprobs[on_device].cpu()",
          "self.logprobs[targets] = state.logprobs[on_device].roll(1, dims=-1).cpu()")
    done = run_tests_on_copy(src, SUITE, "-m", "not vllm")
    failed = failed_tests(done)
    assert done.returncode != 0 and failed, done.stdout[-3000:]
    assert failed[0].startswith(f"{SUITE}::test_sampling_logprobs_are_the_trainers[{DEFAULT_ENGINE}-"), failed
    assert f"engine {DEFAULT_ENGINE!r}, row 0" in done.stdout and "not the trainer's" in done.stdout, \
        done.stdout[-3000:]
