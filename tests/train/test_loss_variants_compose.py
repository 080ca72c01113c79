"""TRL's and verl's other policy losses and masks compose with DaGRPO and TA-GRPO, through the real update.

With DaGRPO's anchors (expert responses: no ratio, not sampled) in the micro-batch, every loss variant and both
token masks leave an anchor's gradient exactly −Â ∇log π(a) (the masks keep anchor rows; the variants replace only
the sampled rows' term), while the sampled rows' term is the variant's. A TA-GRPO run trains with VESPO and the
masks on its pools and logs TRL's metric of the variant.
"""

import pytest
import torch

from rlvr.config import build_config
from rlvr.models import tiny_random_model_and_tokenizer
from rlvr.rollout import Completion
from rlvr.train.batching import OptimizerBatch
from rlvr.train.experience import Experience
from rlvr.train.metrics import UpdateResult
from rlvr.train.plan import compile_plan
from rlvr.train.rollout_phase import Group
from rlvr.train.update import PolicyUpdate

from .test_tagrpo import _trainer as tagrpo_trainer
from .test_update import NoScheduler, RecordingOptimizer

# (kl_cov's penalty does not depend on A: with A = 0 it would move the sampled row; its coefficient is 0 here)
VARIANTS = [dict(loss_type="cispo", epsilon_high=1.5), dict(loss_type="sapo"), dict(loss_type="vespo"),
            dict(policy_loss="clip_cov", clip_cov_ratio=0.5, clip_cov_lb=-10.0), dict(policy_loss="kl_cov", kl_cov_ratio=0.5, ppo_kl_coef=0.0),
            dict(loss_type="luspo")]


@pytest.mark.parametrize("options", VARIANTS, ids=lambda o: o.get("loss_type") or o["policy_loss"])
def test_an_anchor_keeps_its_gradient_under_every_variant_and_mask(options):
    model, tok = tiny_random_model_and_tokenizer(seed=0)
    model.eval()
    prompt, anchor_ids, own_ids = [10, 11, 12], [40, 41, 42, 257], [50, 51, 52]
    group = Group(group_id=1, row={"id": "x"}, prompt_ids=prompt,
                  completions=[Completion(anchor_ids, [], False, is_anchor=True),
                               Completion(own_ids, [0.0, 0.0, 0.0], False)],
                  texts=["", ""], rewards=[1.0, 0.0])
    exp = Experience.from_groups([group])
    advantages = torch.tensor([2.0, 0.0])  # only the anchor carries a gradient
    old = [torch.full((4,), -30.0), torch.full((3,), -30.0)]
    cfg = build_config({"model": "tiny-random", "prompts_per_step": 3, "num_generations": 4,
                        "max_completion_length": 8, "anchors": "always", "max_grad_norm": 0.0, "loss_type": "token_mean",
                        "top_entropy_quantile": 0.1, "off_policy_mask_threshold": -1.0, **options})
    opt = RecordingOptimizer(model.parameters())
    update = PolicyUpdate(compile_plan(cfg).update, model, opt, NoScheduler(), pad_token_id=tok.pad_token_id)
    update.optimizer_step(OptimizerBatch(exp, advantages, old, None, [[0, 1]]), micro=2, result=UpdateResult(lr=0.0),
                          on_policy=False)
    ids = torch.tensor([prompt + anchor_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, 2:-1], -1).gather(-1, torch.tensor(anchor_ids)[:, None])
    model.zero_grad()
    aggregation = compile_plan(cfg).update.loss.aggregation
    scale = {"seq_mean_token_sum": 2, "seq_mean_token_mean": 2 * 4}.get(aggregation, 7)  # the loss's denominator
    (-(2.0 * logp.sum()) / scale).backward()
    for got, p in zip(opt.grads[0], model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-6)


def test_tagrpo_trains_with_vespo_and_the_masks(tmp_path):
    trainer = tagrpo_trainer(tmp_path, algo="tagrpo", max_steps=1, loss_type="vespo", num_iterations=2,
                             top_entropy_quantile=0.5, off_policy_mask_threshold=0.0)
    history = trainer.train()
    assert trainer.plan.update.loss.policy_loss == "vespo" and trainer.plan.rollout.rephrased
    line = history[-1]
    assert "vespo/phi_seq_mean" in line and line["vespo/phi_seq_mean"] > 0 and "clip_ratio/region_mean" not in line
