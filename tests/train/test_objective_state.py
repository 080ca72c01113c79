"""The objective's state across a resume: TRL's adaptive entropy control (its coefficient and last entropy,
TRL's entropy_ctrl_state.json) and sync_ref_model's moved reference (reference_model.pt) are in each
checkpoint, so a run resumed from an earlier checkpoint ends where the uninterrupted run ends. Without them
the resumed run would restart the coefficient (and its gate) and the reference from the initial policy."""

import json

import pytest
import torch

from rlvr.config import build_config
from rlvr.train.trainer import Trainer

from .conftest import LOWERCASE_REWARD, tiny_overrides

OPTIONS = dict(learning_rate=1e-3, beta=0.04, use_adaptive_entropy=True, entropy_coef=0.01, entropy_coef_delta=0.02,
               entropy_target=50.0, sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=0.5,
               save_steps=1, save_total_limit=None)


@pytest.fixture(scope="module")
def reward(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("reward") / "lowercase_reward.py"
    path.write_text(LOWERCASE_REWARD)
    return f"{path}:lowercase_frac"


def _trainer(out, reward, **extra) -> Trainer:
    return Trainer(build_config(tiny_overrides(out, reward_funcs=[reward], **{**OPTIONS, **extra})))


def test_a_resumed_run_continues_the_entropy_control_and_the_reference(tmp_path, reward):
    full = _trainer(tmp_path / "full", reward, max_steps=3)
    full.train()
    first = tmp_path / "full" / "checkpoint-1"
    state = json.loads((first / "entropy_ctrl_state.json").read_text())
    assert state["entropy_coef"] == pytest.approx(0.01 + 0.02 * full.plan.batch.optimizer_steps_per_pass)  # moved
    assert (first / "reference_model.pt").is_file()
    split = tmp_path / "split"
    _trainer(split, reward, max_steps=3).train()  # went on to step 3; resumed from checkpoint-1 below
    options = tiny_overrides(split, reward_funcs=[reward], **{**OPTIONS, "max_steps": 3,
                                                              "resume_from_checkpoint": str(split / "checkpoint-1")})
    del options["output_dir"]  # unset: the checkpoint's own run folder
    resumed = Trainer(build_config(options))
    resumed.train()
    assert resumed.update.entropy.coef == pytest.approx(full.update.entropy.coef)
    for (name, ours), theirs in zip(resumed.policy.state_dict().items(), full.policy.state_dict().values()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=name)
    for ours, theirs in zip(resumed.ref_model.parameters(), full.ref_model.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
