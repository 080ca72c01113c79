"""``optim``: fused AdamW by default (TRL's default), torch's foreach AdamW on request; the same steps."""

import pytest
import torch

from rlvr.config import build_config
from rlvr.train.setup import build_optimizer, build_scheduler


def _step(optim: str, dtype=torch.float32) -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 32, dtype=dtype) * 0.02), torch.nn.Parameter(torch.randn(7, dtype=dtype))]
    cfg = build_config({"optim": optim, "learning_rate": 1e-3, "weight_decay": 0.01})
    optimizer = build_optimizer(params, cfg.optim)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(dtype)
        optimizer.step()
    return optimizer, [p.detach().clone() for p in params]


def test_fused_is_the_default_and_takes_the_steps_foreach_takes():
    fused, a = _step("adamw_torch_fused")
    foreach, b = _step("adamw_torch")
    assert build_config({}).optim.optim == "adamw_torch_fused"
    assert fused.defaults["fused"] is True and fused.defaults["foreach"] is False
    assert not foreach.defaults["fused"]
    torch.manual_seed(0)
    start = torch.randn(64, 32) * 0.02
    assert (a[0] != start).all() and (a[0] - start).abs().mean() > 1e-3  # every weight moved (3 steps at lr 1e-3)
    for x, y in zip(a, b):
        assert torch.allclose(x, y, rtol=0, atol=1e-6), (x - y).abs().max()
    # the states have the same names and shapes, so a checkpoint of one resumes with the other
    sa, sb = fused.state_dict(), foreach.state_dict()
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        assert sa["state"][k].keys() == sb["state"][k].keys()
        assert torch.allclose(sa["state"][k]["exp_avg_sq"], sb["state"][k]["exp_avg_sq"], rtol=1e-6)


def test_fused_takes_bf16_weights():
    _, a = _step("adamw_torch_fused", torch.bfloat16)
    _, b = _step("adamw_torch", torch.bfloat16)
    assert all(x.dtype == torch.bfloat16 for x in a)
    assert all(torch.allclose(x.float(), y.float(), rtol=0, atol=2e-2) for x, y in zip(a, b))


def test_the_schedule_spans_the_run_with_its_warmup():
    cfg = build_config({"lr_scheduler_type": "linear", "warmup_ratio": 0.25, "learning_rate": 1.0})
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, total_steps=8)
    lrs = []
    for _ in range(8):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def test_an_unknown_optimizer_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="optim.*adamw_torch_fused, adamw_torch"):
        build_config({"optim": "adamw_8bit"})
