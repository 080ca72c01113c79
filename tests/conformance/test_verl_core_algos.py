"""rlvr's core math beside verl's own functions (verl 0.9.1's ``verl/trainer/ppo/core_algos.py``), on the same
tensors, for the options rlvr takes under verl's names: GRPO's advantage (``norm_adv_by_std_in_grpo``,
epsilon 1e-6), RLOO's, ``loss_agg_mode`` (token-mean, seq-mean-token-mean, seq-mean-token-sum-norm),
``clip_ratio_low`` / ``clip_ratio_high`` / ``clip_ratio_c`` (rlvr's epsilon / epsilon_high / dual_clip) and
the ``low_var_kl`` (k3) KL loss.

verl itself cannot be imported here: its package imports ray, omegaconf (which pins an antlr that breaks
math-verify) and tensordict at the top. The Makefile installs its wheel without dependencies, and
:func:`verl_functions` takes the named functions' source, unchanged, out of the installed files and runs it
with what those functions use (torch, numpy, and verl's own ``masked_sum`` / ``masked_mean``), their
registration decorators dropped. What runs is verl's code, not a copy in this repository.

Where rlvr and verl differ on purpose (docs/training.md, "Conventions"): a group of one response gets
advantage 0 in rlvr and r / (1 + ε) in verl; verl caps the k3 KL at 10 per token, rlvr (as TRL) does not;
verl's seq-mean modes leave sequences with no trained token out of the count when it is not given. The
tensors below stay clear of those cases.
"""

from __future__ import annotations

import ast
import importlib.util
import types
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
import torch

from rlvr.core.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs, AdvantageSettings
from rlvr.core.losses import POLICY_LOSSES, LossSettings, aggregate, kl_k3
from rlvr.core.names import resolve_aggregation

F64 = torch.float64


def _advantages(estimator: str, rewards: torch.Tensor, groups: torch.Tensor, **settings) -> torch.Tensor:
    """rlvr's registered estimator on (rewards, group ids) with AdvantageSettings(**settings)."""
    return ADVANTAGE_ESTIMATORS[estimator](AdvantageInputs(rewards, groups),
                                           AdvantageSettings(estimator=estimator, **settings))


def _verl_root() -> Path:
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("verl is not installed: `make test` installs its wheel (pip install --no-deps verl==0.9.1)")
    return Path(next(iter(spec.submodule_search_locations)))


def _functions(path: Path, names: tuple[str, ...], namespace: dict) -> dict:
    """The named top-level functions of ``path``, their source as it is (decorators dropped), run in ``namespace``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names}
    assert set(found) == set(names), f"{path} lacks {set(names) - set(found)}"
    for node in found.values():
        node.decorator_list = []
    module = ast.Module(body=list(found.values()), type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102  (verl's own code, from the installed wheel)
    return {name: namespace[name] for name in names}


@pytest.fixture(scope="module")
def verl() -> types.SimpleNamespace:
    root = _verl_root()
    base = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": Optional, "Any": Any,
            "AlgoConfig": type("AlgoConfig", (), {}), "ActorConfig": type("ActorConfig", (), {})}
    verl_f = types.SimpleNamespace(**_functions(root / "utils" / "torch_functional.py", ("masked_sum", "masked_mean"),
                                                dict(base)))
    names = ("compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage", "agg_loss",
             "compute_policy_loss_vanilla", "kl_penalty", "kl_penalty_forward", "compute_policy_loss_clip_cov",
             "compute_policy_loss_kl_cov")
    return types.SimpleNamespace(**_functions(root / "trainer" / "ppo" / "core_algos.py", names,
                                              {**base, "verl_F": verl_f}))


# 3 groups of 4 responses of up to T = 5 tokens (ids carried with the responses, not by position)
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.9, 0.9, 0.1, 1.0, 1.0, 1.0, 1.0], dtype=F64)
GROUPS = torch.tensor([7, 7, 9, 9, 7, 9, 3, 3, 7, 9, 3, 3])
LENGTHS = [5, 3, 1, 4, 2, 5, 5, 3, 4, 1, 2, 5]
T = 5


def _mask() -> torch.Tensor:
    return (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).to(F64)  # [12, 5]


def _token_level(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's token_level_rewards: the outcome reward on a response's last token."""
    out = torch.zeros_like(mask)
    out[torch.arange(len(rewards)), mask.sum(-1).long() - 1] = rewards
    return out


@pytest.mark.parametrize("norm_adv_by_std_in_grpo", [True, False])
def test_grpo_advantage_is_verls(verl, norm_adv_by_std_in_grpo):
    mask = _mask()
    theirs, _ = verl.compute_grpo_outcome_advantage(_token_level(REWARDS, mask), mask, GROUPS.numpy(), epsilon=1e-6,
                                                    norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    ours = _advantages("grpo", REWARDS, GROUPS, scale_rewards="group" if norm_adv_by_std_in_grpo else "none", eps=1e-6)
    torch.testing.assert_close(ours[:, None] * mask, theirs, rtol=1e-6, atol=1e-6)


def test_rloo_advantage_is_verls(verl):
    mask = _mask()
    theirs, _ = verl.compute_rloo_outcome_advantage(_token_level(REWARDS, mask), mask, GROUPS.numpy())
    ours = _advantages("rloo", REWARDS, GROUPS, scale_rewards="none")  # algo=rloo's preset: no std scaling
    torch.testing.assert_close(ours[:, None] * mask, theirs, rtol=1e-6, atol=1e-6)


def _logprobs(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return -torch.rand(len(LENGTHS), T, generator=gen, dtype=F64) * 2  # log-probs in (-2, 0)


VERL_MODES = {"token-mean": None, "seq-mean-token-mean": None, "seq-mean-token-sum-norm": T}


@pytest.mark.parametrize("mode", list(VERL_MODES))
def test_loss_agg_mode_is_verls(verl, mode):
    loss, mask = _logprobs(1) * 3, _mask()
    theirs = verl.agg_loss(loss, mask, mode, loss_scale_factor=VERL_MODES[mode])
    ours = aggregate(loss, mask, resolve_aggregation(mode), max_completion_length=T)  # verl's spelling: an alias
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


class _ActorConfig:
    """What compute_policy_loss_vanilla reads of verl's ActorConfig."""

    def __init__(self, clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: float):
        self.clip_ratio, self.clip_ratio_low, self.clip_ratio_high = clip_ratio_low, clip_ratio_low, clip_ratio_high
        self._c = clip_ratio_c
        self.global_batch_info: dict = {}

    def get(self, key: str, default: float) -> float:
        return self._c if key == "clip_ratio_c" else default


@pytest.mark.parametrize("mode", list(VERL_MODES))
@pytest.mark.parametrize(("low", "high", "c"), [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, 1.5)])
def test_the_clipped_policy_loss_is_verls(verl, mode, low, high, c):
    """verl's vanilla PPO loss (dual clip at clip_ratio_c for A < 0, always on) = rlvr's clipped surrogate with
    epsilon = clip_ratio_low, epsilon_high = clip_ratio_high, dual_clip = clip_ratio_c, then aggregate; value
    and gradient, with ratios from e^-1.8 to e^1.8 so every branch (clip low/high, dual clip) is taken."""
    mask = _mask()
    old = _logprobs(2)
    logp = (old + (_logprobs(3) + 1.0) * 1.8).detach()  # log-ratios in (-1.8, 1.8)
    advantages = _advantages("grpo", REWARDS, GROUPS)[:, None].expand(-1, T)
    theirs_lp, ours_lp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    theirs, _ = verl.compute_policy_loss_vanilla(old, theirs_lp, advantages, mask, loss_agg_mode=mode,
                                                 config=_ActorConfig(low, high, c))
    settings = LossSettings(epsilon=low, epsilon_high=high, dual_clip=c, aggregation=resolve_aggregation(mode),
                            max_completion_length=T)
    per_token, _ = POLICY_LOSSES["clip"](ours_lp, old, advantages, mask, settings)
    ours = aggregate(per_token, mask, settings.aggregation, max_completion_length=settings.max_completion_length)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    (grad_theirs,), (grad_ours,) = torch.autograd.grad(theirs, theirs_lp), torch.autograd.grad(ours, ours_lp)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-6, atol=1e-6)


def test_the_k3_kl_is_verls_low_var_kl(verl):
    logp, ref, mask = _logprobs(4).requires_grad_(), _logprobs(5), _mask()
    theirs = verl.kl_penalty(logp, ref, "low_var_kl")
    ours = kl_k3(logp, ref, mask)
    torch.testing.assert_close(ours, theirs * mask, rtol=1e-6, atol=1e-6)
    (g_theirs,) = torch.autograd.grad((theirs * mask).sum(), logp)
    (g_ours,) = torch.autograd.grad(ours.sum(), logp)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-6, atol=1e-6)


class _CovActorConfig(_ActorConfig):
    """What verl's compute_policy_loss_clip_cov / _kl_cov read of its ActorConfig (actor.policy_loss.*)."""

    def __init__(self, low: float, high: float, **policy_loss):
        super().__init__(low, high, 3.0)
        self.policy_loss = types.SimpleNamespace(**{"clip_cov_ratio": None, "clip_cov_lb": None, "clip_cov_ub": None,
                                                    "kl_cov_ratio": None, "ppo_kl_coef": None, **policy_loss})


# covariance windows wide enough that candidates outnumber the tokens drawn (the random draw is exercised)
COV_CASES = {
    "clip_cov": [dict(clip_cov_ratio=0.2, clip_cov_lb=-0.5, clip_cov_ub=5.0),
                 dict(clip_cov_ratio=0.05, clip_cov_lb=0.0, clip_cov_ub=0.8)],
    "kl_cov": [dict(kl_cov_ratio=0.2, ppo_kl_coef=1.0), dict(kl_cov_ratio=0.01, ppo_kl_coef=0.3)],
}


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize(("loss_mode", "index"), [(m, i) for m, cases in COV_CASES.items() for i in range(len(cases))])
def test_clip_cov_and_kl_cov_are_verls(verl, loss_mode, index, mode):
    """verl's Clip-Cov and KL-Cov policy losses (policy_loss.loss_mode clip_cov / kl_cov, settings under their verl
    names) = rlvr's policy_loss=clip_cov / kl_cov, then aggregate: the loss and its gradient. Clip-Cov draws its
    tokens with torch's generator (randperm): both sides run from the same seed, so they draw the same tokens."""
    mask, old = _mask(), _logprobs(2)
    logp = (old + (_logprobs(3) + 1.0) * 0.6).detach()  # log-ratios in (-0.6, 0.6): some clipped, most not
    advantages = _advantages("grpo", REWARDS, GROUPS)[:, None].expand(-1, T)
    options = COV_CASES[loss_mode][index]
    theirs_lp, ours_lp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    function = verl.compute_policy_loss_clip_cov if loss_mode == "clip_cov" else verl.compute_policy_loss_kl_cov
    torch.manual_seed(11)
    theirs, metrics = function(old, theirs_lp, advantages, mask, loss_agg_mode=mode,
                               config=_CovActorConfig(0.2, 0.28, **options))
    settings = LossSettings(policy_loss=loss_mode, epsilon=0.2, epsilon_high=0.28, aggregation=resolve_aggregation(mode),
                            **options)
    torch.manual_seed(11)
    per_token, removed = POLICY_LOSSES[loss_mode](ours_lp, old, advantages, mask, settings)
    ours = aggregate(per_token, mask, settings.aggregation)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    (grad_theirs,), (grad_ours,) = torch.autograd.grad(theirs, theirs_lp), torch.autograd.grad(ours, ours_lp)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-6, atol=1e-6)
    if loss_mode == "clip_cov":  # rlvr's removed tokens are verl's pg_clipfrac, and some are removed
        assert float(removed.sum()) / float(mask.sum()) == pytest.approx(metrics["actor/pg_clipfrac"], abs=1e-9)
        assert bool(removed.any())
    else:  # some tokens were penalised: the loss differs from the plain −A·ρ
        plain = aggregate(-advantages * (logp - old).exp(), mask, settings.aggregation)
        assert abs(float(ours) - float(plain)) > 1e-6
