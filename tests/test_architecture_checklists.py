"""The four checklists of docs/design/architecture.md ("Checklists"), each followed literally with a toy
defined here, then one step of a tiny run trained with it, checking a number only the toy could produce.

Every registration is undone after its test (``restore_registries``, pytest's ``monkeypatch``), so the
rest of the suite sees the built-in registries, sections and reward modules only.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import rlvr
import rlvr.train.trainer as trainer_module
from rlvr.config import build_config, field_help, load_config
from rlvr.config.experiment import FIELD_SECTION, SECTIONS
from rlvr.config.fields import _f, _fail
from rlvr.config.sections import AlgorithmConfig
from rlvr.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    AdvantageSettings,
    group_statistics,
    register_advantage,
    sigma,
)
from rlvr.core.losses import POLICY_LOSSES, LossSettings, register_policy_loss
from rlvr.core.names import ADVANTAGE_ESTIMATOR_NAMES, POLICY_LOSS_NAMES
from rlvr.data import load_rows
from rlvr.train.dry_run import dry_run_report
from rlvr.train.plan import compile_plan
from rlvr.train.rewarding import reward_columns
from rlvr.train.trainer import Trainer
from tests.helpers.package_copy import failed_tests, run_tests_on_copy

DATA = "rg:basic_arithmetic:size=64"
COMPLETIONS = 8  # prompts_per_step × num_generations: every completion goes to samples.jsonl
EPS = 1e-6  # advantage_eps (rlvr's default)

# A reward that differs inside every group (the groups' completions come in order, 4 by 4): each step
# has mixed-reward groups, so a step always makes an update.
ALTERNATING_REWARD = '''
def alternating(prompts, completions, **kwargs):
    return [float(i % 2) for i in range(len(completions))]
'''


def tiny_run(output_dir: Path, **extra) -> dict:
    """One step of a tiny-random run on CPU, every completion logged to samples.jsonl."""
    return {"model": "tiny-random", "data": DATA, "max_steps": 1, "prompts_per_step": 2, "num_generations": 4,
            "max_completion_length": 8, "output_dir": str(output_dir), "progress_bar": False,
            "verifier_workers": 1, "num_completions_to_log": COMPLETIONS, **extra}


def alternating_reward(tmp_path: Path) -> str:
    path = tmp_path / "alternating_reward.py"
    path.write_text(ALTERNATING_REWARD)
    return f"{path}:alternating"


def samples(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]


def grpo_by_hand(records: list[dict]) -> list[float]:
    """GRPO's advantages of the logged completions, from their rewards and group ids (unbiased σ, + ε)."""
    groups = defaultdict(list)
    for r in records:
        groups[r["group_id"]].append(r["reward"])
    out = []
    for r in records:
        g = groups[r["group_id"]]
        mean = sum(g) / len(g)
        std = math.sqrt(sum((x - mean) ** 2 for x in g) / (len(g) - 1))
        out.append(0.0 if max(g) == min(g) else (r["reward"] - mean) / (std + EPS))
    return out


@pytest.fixture(autouse=True)
def restore_registries():
    """Undo whatever the decorators registered: the registries and the names the config accepts, in place."""
    saved = [(ADVANTAGE_ESTIMATORS, dict(ADVANTAGE_ESTIMATORS)), (POLICY_LOSSES, dict(POLICY_LOSSES))]
    names = [(ADVANTAGE_ESTIMATOR_NAMES, set(ADVANTAGE_ESTIMATOR_NAMES)), (POLICY_LOSS_NAMES, set(POLICY_LOSS_NAMES))]
    modules = set(sys.modules)
    try:
        yield
    finally:
        for registry, before in saved:
            registry.clear()
            registry.update(before)
        for accepted, before in names:
            accepted.intersection_update(before)
            accepted.update(before)
        for name in set(sys.modules) - modules:  # the toy reward files' modules (rlvr_user_reward_*, toy_*)
            if name.startswith(("rlvr_user_reward_", "toy_")):
                del sys.modules[name]


# ---------------------------------------------------------------------------------------------
# Add an option


@dataclass(frozen=True)
class ToyAlgorithmConfig(AlgorithmConfig):
    """Step 1 (Declare): the algorithm section with one more field, validated in ``__post_init__``."""

    toy_advantage_scale: float = _f(1.0, "toy (tests only): the toy_scaled estimator's advantages times this; > 0")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.toy_advantage_scale <= 0:
            _fail("toy_advantage_scale", self.toy_advantage_scale, "use a scale > 0 (1: GRPO's advantages)")


@dataclass(frozen=True)
class ToyAdvantageSettings(AdvantageSettings):
    """Step 2 (Decide): a field of the settings object that uses it."""

    toy_advantage_scale: float = 1.0


@pytest.mark.slow
def test_add_an_option(tmp_path, monkeypatch):
    """"Add an option", with a toy ``toy_advantage_scale`` read by a toy estimator.

    1. Declare: rlvr/config/sections.py cannot be edited from a test, so the option is a field of a
       subclass of ``AlgorithmConfig`` put in its place in ``SECTIONS`` and ``FIELD_SECTION`` (the two
       dicts ``build_config``, ``load_config``, ``field_help`` and YAML flattening read). No other patch
       is needed: ``ExperimentConfig``'s ``algorithm: AlgorithmConfig`` is a plain annotation, so it
       holds the subclass, and its ``_check_finite`` reads the instance's fields (nan is refused too).
       The one place left behind is ``rlvr.config.parsing.KNOWN_KEYS``, frozen at import: it only
       tells a ``--key value`` token from a ``key=value`` one on the command line.
    2. Decide: ``train/plan.py`` cannot be edited either, so ``compile_plan`` is wrapped where the
       Trainer calls it (``rlvr.train.trainer.compile_plan``): the plan's ``AdvantageSettings`` becomes
       a subclass carrying the field, filled from the config once.
    3. Use: the phase that reads ``AdvantageSettings`` is the estimator (``compute_advantages`` hands
       ``plan.settings`` to it; it is a function, not an object with ``self.s``), so a toy estimator
       registered here reads ``settings.toy_advantage_scale``; nothing reads ``cfg`` after the plan.
    4. Document: the help text is in ``field_help()`` (``rlvr train --help``); docs/training.md and the
       option table (tools/option_readers.py scans src/ only) cannot hold a toy.
    5. Test: the refusal of bad values, the plan's value, and a run whose advantages change with it.
    """
    name = "toy_advantage_scale"
    assert name not in FIELD_SECTION  # every field name is unique across sections
    with pytest.raises(ValueError, match=f"unknown option '{name}'"):
        build_config({"model": "tiny-random", name: 2.0})

    # 1. Declare
    monkeypatch.setitem(SECTIONS, "algorithm", ToyAlgorithmConfig)
    monkeypatch.setitem(FIELD_SECTION, name, "algorithm")
    assert build_config({"model": "tiny-random"}).algorithm.toy_advantage_scale == 1.0
    assert build_config({"model": "tiny-random", name: 2}).algorithm.toy_advantage_scale == 2.0  # int → float
    for bad, error in ((0, ValueError), (-1.5, ValueError), (float("nan"), ValueError), ("big", TypeError)):
        with pytest.raises(error, match=name):
            build_config({"model": "tiny-random", name: bad})
    # name=value works on the command line and in YAML (flat or nested under its section) at once
    assert load_config(None, ["model=tiny-random", f"{name}=2.5"]).algorithm.toy_advantage_scale == 2.5
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: tiny-random\nalgorithm:\n  {name}: 0.5\n")
    assert load_config(str(recipe), []).algorithm.toy_advantage_scale == 0.5
    with pytest.raises(ValueError, match=name):
        load_config(None, ["model=tiny-random", f"{name}=-1"])
    # 4. the help text is what `rlvr train --help` prints
    assert ("algorithm", name, 1.0, ToyAlgorithmConfig.__dataclass_fields__[name].metadata["help"]) in field_help()

    # 3. Use (registered first: step 2's settings name it): the estimator reads its settings only
    seen: list[float] = []

    @register_advantage("toy_scaled")
    def toy_scaled(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
        seen.append(settings.toy_advantage_scale)
        grpo = ADVANTAGE_ESTIMATORS["grpo"](inputs, settings)
        return grpo * settings.toy_advantage_scale

    # 2. Decide: once, in the plan the Trainer builds
    def compile_plan_with_toy(cfg, *, world_size: int = 1):
        plan = compile_plan(cfg, world_size=world_size)
        base = {f.name: getattr(plan.advantages.settings, f.name) for f in dataclasses.fields(AdvantageSettings)}
        settings = ToyAdvantageSettings(**base, toy_advantage_scale=cfg.algorithm.toy_advantage_scale)
        return dataclasses.replace(plan, advantages=dataclasses.replace(plan.advantages, settings=settings))

    monkeypatch.setattr(trainer_module, "compile_plan", compile_plan_with_toy)
    reward = alternating_reward(tmp_path)

    # 5. the plan's value
    cfg = build_config(tiny_run(tmp_path / "plan", advantage_estimator="toy_scaled", **{name: 2.5}))
    plan = compile_plan_with_toy(cfg)
    assert plan.advantages.settings.toy_advantage_scale == 2.5
    assert plan.advantages.settings.estimator == "toy_scaled"

    # 5. the behaviour: the same step with scale 1 and 2.5; each run's advantages are scale × GRPO's
    for scale in (1.0, 2.5):
        run = tmp_path / f"scale_{scale}"
        seen.clear()
        metrics = Trainer(build_config(tiny_run(run, advantage_estimator="toy_scaled", reward_funcs=[reward],
                                                **{name: scale}))).train()
        assert seen == [scale]  # the estimator ran once, with the plan's value
        assert metrics[0]["rollout/frac_uniform_groups"] == 0.0  # every group trained
        assert math.isfinite(metrics[0]["train/grad_norm"]) and metrics[0]["train/grad_norm"] > 0
        records = samples(run)
        assert len(records) == COMPLETIONS
        expected = [scale * a for a in grpo_by_hand(records)]
        assert [r["advantage"] for r in records] == pytest.approx(expected, rel=1e-5, abs=1e-6)
        # two of four rewarded per group: GRPO's ±√3/2, times the scale
        assert [abs(r["advantage"]) for r in records] == pytest.approx([scale * math.sqrt(3) / 2] * COMPLETIONS, rel=1e-5)

    monkeypatch.undo()
    with pytest.raises(ValueError, match=f"unknown option '{name}'"):
        build_config({"model": "tiny-random", name: 2.0})
    assert trainer_module.compile_plan is compile_plan


# ---------------------------------------------------------------------------------------------
# Add a loss


@pytest.mark.slow
def test_add_a_loss(tmp_path):
    """"Add a loss": a toy policy loss whose value is the knob ``settings.epsilon`` at every trained token
    (so the step's loss reads exactly epsilon) and whose gradient is the plain policy gradient
    −A·∇log π (the term −A·(log π − log π_old) is 0 in value on the on-policy pass); it reports every
    token as clipped (``train/clip_frac`` = 1, which ``clip`` never gives with ratio 1)."""
    name = "toy_constant_pg"
    assert name not in POLICY_LOSSES and name not in POLICY_LOSS_NAMES
    with pytest.raises(ValueError, match="policy_loss"):
        build_config({"model": "tiny-random", "policy_loss": name})

    calls: list[dict] = []

    # 1. the function, decorated; its knob read from LossSettings
    @register_policy_loss(name)
    def toy_constant_pg(logprobs, old_logprobs, advantages, mask, settings):
        mask = mask.bool()
        calls.append({"settings": settings, "advantages": advantages.detach().clone(), "shape": tuple(mask.shape)})
        adv = advantages.unsqueeze(-1)  # [N, 1]
        loss = settings.epsilon - adv * (logprobs - old_logprobs)  # [N, T]
        return torch.where(mask, loss, torch.zeros_like(loss)), mask.clone()

    # 2. policy_loss=name now selects it: the registry added the name to what the config accepts
    assert POLICY_LOSSES[name] is toy_constant_pg and name in POLICY_LOSS_NAMES
    epsilon = 0.3125
    cfg = build_config(tiny_run(tmp_path / "run", policy_loss=name, epsilon=epsilon,
                                reward_funcs=[alternating_reward(tmp_path)]))
    assert cfg.algorithm.policy_loss == name
    assert compile_plan(cfg).update.loss == LossSettings(policy_loss=name, epsilon=epsilon, max_completion_length=8)

    (m,) = Trainer(cfg).train()
    assert calls, "the toy loss was never called"
    assert all(c["settings"].policy_loss == name and c["settings"].epsilon == epsilon for c in calls)
    assert sum(c["shape"][0] for c in calls) == COMPLETIONS  # every completion went through it, once
    assert any(bool(c["advantages"].abs().gt(0).any()) for c in calls)
    assert m["train/loss"] == pytest.approx(epsilon, abs=1e-6)  # token_mean of epsilon at every token
    assert m["loss"] == pytest.approx(epsilon, abs=1e-6)  # TRL's name
    assert m["train/clip_frac"] == 1.0  # from the mask the toy returned
    # TRL's clip_ratio/* are not the loss's: rlvr.core.losses.clip_regions counts PPO's ε regions of the
    # ratio whatever policy_loss is (ratio 1 here: none)
    assert m["clip_ratio/region_mean"] == 0.0
    assert math.isfinite(m["train/grad_norm"]) and m["train/grad_norm"] > 0  # −A·∇log π, A not all 0
    assert m["train/skipped_steps"] == 0

    POLICY_LOSSES.pop(name)
    POLICY_LOSS_NAMES.discard(name)
    with pytest.raises(ValueError, match="policy_loss"):
        build_config({"model": "tiny-random", "policy_loss": name})


# ---------------------------------------------------------------------------------------------
# Add an advantage estimator


@pytest.mark.slow
def test_add_an_advantage_estimator(tmp_path):
    """"Add an advantage estimator": a toy "three-eighths GRPO", A = 0.375·(r − mean_g r) / (σ + ε), with the
    group statistics from ``group_statistics`` and σ from ``sigma`` as ``settings.scale_rewards`` says
    (group: the group's σ; batch: the batch's; none: no division). The logged advantages must be
    0.375 × GRPO's, computed here from the logged rewards."""
    name = "toy_three_eighths"
    factor = 0.375
    assert name not in ADVANTAGE_ESTIMATORS and name not in ADVANTAGE_ESTIMATOR_NAMES
    with pytest.raises(ValueError, match="advantage_estimator"):
        build_config({"model": "tiny-random", "advantage_estimator": name})

    calls: list[AdvantageSettings] = []

    # 1. the function, decorated
    @register_advantage(name)
    def toy_three_eighths(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
        calls.append(settings)
        rewards = inputs.rewards
        stats = group_statistics(rewards, inputs.group_ids, inputs.stats_mask)
        centred = rewards.to(torch.float64) - stats.mean
        if settings.scale_rewards != "none":
            centred = centred / (sigma(rewards, inputs.group_ids, settings.scale_rewards, stats) + settings.eps)
        dead = stats.uniform | (stats.size < 2)
        return (factor * torch.where(dead, torch.zeros_like(centred), centred)).to(rewards.dtype)

    # 2. advantage_estimator=name now selects it (the registry extends the names the config accepts)
    assert ADVANTAGE_ESTIMATORS[name] is toy_three_eighths and name in ADVANTAGE_ESTIMATOR_NAMES
    cfg = build_config(tiny_run(tmp_path / "run", advantage_estimator=name,
                                reward_funcs=[alternating_reward(tmp_path)]))
    assert cfg.algorithm.advantage_estimator == name
    assert compile_plan(cfg).advantages.settings.estimator == name
    # "a batch holding DaGRPO anchors uses dagrpo": the config never lets a registered estimator meet one
    for dagrpo in ({"anchors": "failed"}, {"pair_masking": True}):
        with pytest.raises(ValueError, match="advantage_estimator"):
            build_config({"model": "tiny-random", "advantage_estimator": name, **dagrpo})

    (m,) = Trainer(cfg).train()
    assert len(calls) == 1 and calls[0].estimator == name and calls[0].scale_rewards == "group"
    assert m["rollout/frac_uniform_groups"] == 0.0
    records = samples(tmp_path / "run")
    assert len(records) == COMPLETIONS
    expected = [factor * a for a in grpo_by_hand(records)]
    assert [r["advantage"] for r in records] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # two of four rewarded per group: GRPO's ±√3/2, the toy's 0.375 × that
    assert [abs(r["advantage"]) for r in records] == pytest.approx([factor * math.sqrt(3) / 2] * COMPLETIONS, rel=1e-5)
    assert math.isfinite(m["train/grad_norm"]) and m["train/grad_norm"] > 0

    ADVANTAGE_ESTIMATORS.pop(name)
    ADVANTAGE_ESTIMATOR_NAMES.discard(name)
    with pytest.raises(ValueError, match="advantage_estimator"):
        build_config({"model": "tiny-random", "advantage_estimator": name})


# ---------------------------------------------------------------------------------------------
# Add a reward function

TOY_REWARDS = '''
import json
from pathlib import Path

SEEN = Path(__file__).with_name("seen.json")


def toy_reward(prompts, completions, completion_ids, trainer_state, log_metric, log_extra, **columns):
    """0.05, 0.15, 0.25, 0.35 in turn: four values in every group of four."""
    values = [0.05 + 0.1 * (i % 4) for i in range(len(completions))]
    SEEN.write_text(json.dumps({
        "n": len(completions), "prompts": len(prompts), "completion_ids": len(completion_ids),
        "ids_are_ints": all(isinstance(t, int) for ids in completion_ids for t in ids),
        "global_step": trainer_state.global_step, "max_steps": trainer_state.max_steps,
        "columns": {key: len(value) for key, value in columns.items()},
    }))
    log_metric("toy_calls", 3.0)
    log_extra("toy_value", values)
    return values
'''

TOY_MODULE = '''
async def toy_bonus(prompts, completions, **kwargs):
    """async def: None for the first completion of each call (not applicable), 1.0 for the rest."""
    return [None] + [1.0] * (len(completions) - 1)
'''


@pytest.mark.slow
def test_add_a_reward_function(tmp_path, monkeypatch):
    """"Add a reward function": a toy ``toy_reward`` in a file (``path/to/file.py:function``) that records
    the keyword arguments it got and logs a metric and an extra column, and an ``async def`` toy
    ``toy_bonus`` in a module (``package.module.function``), weighted 2 and 0.5."""
    rewards_file = tmp_path / "toy_rewards.py"
    rewards_file.write_text(TOY_REWARDS)
    (tmp_path / "toy_checklist_module.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))

    # 2. named in the config, weighed by reward_weights
    cfg = build_config(tiny_run(tmp_path / "run", reward_funcs=[f"{rewards_file}:toy_reward",
                                                                "toy_checklist_module.toy_bonus"],
                                reward_weights=[2.0, 0.5]))
    (m,) = Trainer(cfg).train()

    # 1. TRL's signature: every dataset column as a keyword list, completion_ids, trainer_state, log_*
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["n"] == seen["prompts"] == seen["completion_ids"] == COMPLETIONS and seen["ids_are_ints"]
    assert (seen["global_step"], seen["max_steps"]) == (0, 1)
    dataset_columns = set(reward_columns(load_rows(DATA)[0]))
    assert "answer" in dataset_columns and dataset_columns <= set(seen["columns"])
    assert all(n == COMPLETIONS for n in seen["columns"].values())

    # 3. logged as rewards/<name>_mean and TRL's rewards/<name>/mean
    toy_values = [0.05 + 0.1 * (i % 4) for i in range(COMPLETIONS)]
    toy_mean = sum(toy_values) / COMPLETIONS  # 0.2
    assert m["rewards/toy_reward_mean"] == pytest.approx(toy_mean)
    assert m["rewards/toy_reward/mean"] == pytest.approx(toy_mean)
    assert m["rewards/toy_bonus_mean"] == pytest.approx(1.0)  # the None values are left out
    assert m["rewards/toy_bonus/mean"] == pytest.approx(1.0)
    assert m["rewards/toy_reward/errors"] == 0.0 and m["rewards/toy_bonus/errors"] == 0.0
    assert m["reward_fn/toy_calls"] == 3.0  # log_metric
    # the weighted sum per completion: 2·toy (+ 0.5·bonus where it applies)
    records = samples(tmp_path / "run")
    assert len(records) == COMPLETIONS
    for r in records:
        value = r["extra"]["toy_value"]  # log_extra
        assert any(abs(value - v) < 1e-9 for v in toy_values)
        assert any(abs(r["reward"] - (2.0 * value + bonus)) < 1e-6 for bonus in (0.0, 0.5))
    assert sorted(round(r["reward"], 6) for r in records) == sorted(
        round(2.0 * v + (0.0 if i == 0 else 0.5), 6) for i, v in enumerate(toy_values))
    assert m["reward"] == pytest.approx(m["rollout/reward_mean"])
    assert m["reward"] == pytest.approx(sum(r["reward"] for r in records) / COMPLETIONS)
    assert m["rollout/frac_uniform_groups"] == 0.0 and m["train/grad_norm"] > 0


# ---------------------------------------------------------------------------------------------
# The three core checklists, followed in a copy of the package, run from the command line

COPY_REFERENCES = '''

def toy_half_grpo(inputs, s):
    """Half GRPO's advantage, from GRPO's loop reference (the toy estimator's contract)."""
    return 0.5 * grpo(inputs, s)


def toy_constant_pg(logprobs, old_logprobs, advantages, mask, s):
    """epsilon − A·(log π − log π_old) at every trained token, none clipped (the toy loss's contract)."""
    adv = _advantages(advantages)

    def token(i, t):
        return s.epsilon - adv[i] * (logprobs[i, t].to(F64) - old_logprobs[i, t].detach().to(F64)), False

    return _token_table(logprobs, mask, token)


def on_policy_toy_constant_pg(logprobs, advantages, s):
    """epsilon at every token at ratio 1."""
    return torch.full(logprobs.shape, s.epsilon, dtype=F64)


def toy_double_token_mean(per_token, mask, d):
    """Twice the token mean (the toy aggregation's contract)."""
    return 2 * token_mean(per_token, mask, d)
'''

COPY_ESTIMATOR = '''

@register_advantage("toy_half_grpo", reference=references.toy_half_grpo,
                    invariants=("zero_mean_per_group", "shift_invariant", "permutation_equivariant",
                                "uniform_group_zero"))
def toy_half_grpo(inputs: AdvantageInputs, settings: AdvantageSettings) -> torch.Tensor:
    """Half GRPO's advantage (a toy of the checklist test)."""
    return 0.5 * grpo(inputs, settings)
'''

COPY_LOSS_AND_AGGREGATION = '''

@register_policy_loss("toy_constant_pg", reference=references.toy_constant_pg,
                      on_policy=references.on_policy_toy_constant_pg)
def toy_constant_pg(logprobs, old_logprobs, advantages, mask, settings):
    """epsilon at every trained token in value, the plain policy gradient in gradient (a checklist toy)."""
    mask = mask.bool()
    loss = settings.epsilon - advantages.detach().unsqueeze(-1) * (logprobs - old_logprobs.detach())  # [N, T]
    return torch.where(mask, loss, torch.zeros_like(loss)), torch.zeros_like(mask)  # nothing clipped


@register_aggregation("toy_double_token_mean", reference=references.toy_double_token_mean)
def toy_double_token_mean(per_token, m, d: Denominators):
    """Twice verl's token-mean (a checklist toy)."""
    return 2 * _token_mean(per_token, m, d)
'''


@pytest.mark.slow
def test_the_core_checklists_in_a_copy_of_the_package(tmp_path):
    """"Add an advantage estimator", "Add a loss" and "Add a loss aggregation" done exactly as they say, in a copy
    of src/rlvr: one decorated function appended to core/advantages.py, two to core/losses.py, each declaring its
    contract with a reference appended to core/references.py, nothing else edited. The generated contract suites
    (tests/contracts/) run on the copy and pass for the three toys; a fresh interpreter on the copy accepts the three
    names in the dry run and trains one step whose advantages are half GRPO's and whose loss is 2·epsilon (the toy
    loss's value under the toy aggregation)."""
    package = tmp_path / "src" / "rlvr"
    shutil.copytree(Path(rlvr.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    with (package / "core" / "advantages.py").open("a") as f:
        f.write(COPY_ESTIMATOR)
    with (package / "core" / "losses.py").open("a") as f:
        f.write(COPY_LOSS_AND_AGGREGATION)
    with (package / "core" / "references.py").open("a") as f:
        f.write(COPY_REFERENCES)
    suites = [f"tests/contracts/test_{name}_contract.py" for name in ("estimator", "loss", "aggregation")]
    checked = run_tests_on_copy(tmp_path / "src", *suites, "-k", "toy_", "-rA")
    assert checked.returncode == 0 and not failed_tests(checked), checked.stdout[-3000:]
    passed = [line for line in checked.stdout.splitlines() if line.startswith("PASSED ")]
    for toy in ("toy_half_grpo", "toy_constant_pg", "toy_double_token_mean"):  # each toy went through its suite
        assert sum(toy in line for line in passed) >= 3, (toy, checked.stdout[-3000:])
    (tmp_path / "alternating.py").write_text(ALTERNATING_REWARD)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    epsilon = 0.3125
    command = [sys.executable, "-m", "rlvr.cli", "train", "advantage_estimator=toy_half_grpo",
               "policy_loss=toy_constant_pg", "loss_type=toy_double_token_mean", f"epsilon={epsilon}",
               "reward_funcs=alternating.py:alternating",
               *(f"{k}={v}" for k, v in tiny_run(tmp_path / "run").items())]
    for extra in (["--dry-run"], []):
        done = subprocess.run([*command, *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    assert f"{package}" in subprocess.run([sys.executable, "-c", "import rlvr; print(rlvr.__file__)"], env=env,
                                          capture_output=True, text=True, check=True).stdout  # the copy ran
    records = samples(tmp_path / "run")
    assert [r["advantage"] for r in records] == pytest.approx([0.5 * a for a in grpo_by_hand(records)], rel=1e-5,
                                                              abs=1e-6)
    assert [abs(r["advantage"]) for r in records] == pytest.approx([0.5 * math.sqrt(3) / 2] * COMPLETIONS, rel=1e-5)
    (m,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert m["train/loss"] == pytest.approx(2 * epsilon, abs=1e-6)
    assert m["train/clip_frac"] == 0.0 and m["train/grad_norm"] > 0
    # the unedited package refuses the names
    done = subprocess.run([*command, "--dry-run"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          check=False, env={**env, "PYTHONPATH": str(Path(rlvr.__file__).parents[1])})
    assert done.returncode != 0 and "advantage_estimator" in done.stderr


# ---------------------------------------------------------------------------------------------
# Add a rollout engine


class ToyCopyEngine:
    """"Add a rollout engine", step 1: a toy that keeps its own copy of the weights (rlvr's decode engine on a
    deep copy of the policy, refreshed by ``sync_weights``), with its abilities as class attributes."""

    supports_row_seeds = True
    keeps_own_weights = True
    supports_async_generation = True
    is_correction_by_default = True
    supports_sleep = False
    optional_package = None

    def __init__(self, model, *, pad_token_id, eos_token_ids):
        from rlvr.rollout.decode_engine import DecodeEngine

        self.policy, self.copy = model, copy.deepcopy(model)
        self.eos_token_ids = list(eos_token_ids)
        self.inner = DecodeEngine(self.copy, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids, fused=False)
        self.threads: list[str] = []
        self.syncs = 0

    def generate(self, prompts, **kwargs):
        self.threads.append(threading.current_thread().name)
        return self.inner.generate(prompts, **kwargs)

    def sync_weights(self):
        self.copy.load_state_dict(self.policy.state_dict())
        self.syncs += 1


class ToyLocalEngine(ToyCopyEngine):
    """The same engine declaring that it samples from the training model itself."""

    keeps_own_weights = False
    supports_async_generation = False
    is_correction_by_default = False


@pytest.mark.slow
def test_add_a_rollout_engine(tmp_path, monkeypatch):
    """"Add a rollout engine": the toy registered by name (step 2), nothing else edited; the plan reads its
    abilities (step 3): async generation is accepted and the importance-sampling correction is on by default
    because the class says it keeps its own weights, and a run of two steps samples step 2 ahead, on the
    rollout thread, from the toy's own copy (synced after each update), with the correction's metrics logged."""
    from rlvr.rollout.names import ROLLOUT_ENGINES

    with pytest.raises(ValueError, match="rollout_engine"):
        build_config({"model": "tiny-random", "rollout_engine": "toy_copy"})
    # 2. Name it
    monkeypatch.setitem(ROLLOUT_ENGINES, "toy_copy", f"{__name__}:ToyCopyEngine")
    monkeypatch.setitem(ROLLOUT_ENGINES, "toy_local", f"{__name__}:ToyLocalEngine")
    reward = alternating_reward(tmp_path)
    cfg = build_config(tiny_run(tmp_path / "run", rollout_engine="toy_copy", async_generation=True, max_steps=2,
                                reward_funcs=[reward]))
    # 3. the plan reads the abilities
    plan = compile_plan(cfg)
    assert plan.engine.ahead and plan.update.is_correction is not None
    off = build_config(tiny_run(tmp_path / "off", rollout_engine="toy_copy", vllm_importance_sampling_correction=False))
    assert compile_plan(off).update.is_correction is None  # the config still decides when it says so
    local = build_config(tiny_run(tmp_path / "local", rollout_engine="toy_local"))
    assert compile_plan(local).update.is_correction is None and not compile_plan(local).engine.ahead
    with pytest.raises(ValueError, match="async_generation=True.*rollout_engine=toy_local samples from the training"):
        compile_plan(build_config(tiny_run(tmp_path / "x", rollout_engine="toy_local", async_generation=True)))
    with pytest.raises(ValueError, match="rollout_engine=toy_copy with parallelism=fsdp is not supported"):
        compile_plan(build_config(tiny_run(tmp_path / "y", rollout_engine="toy_copy", parallelism="fsdp")))
    asleep = build_config(tiny_run(tmp_path / "z", rollout_engine="toy_local", vllm_enable_sleep_mode=True))
    assert any("vllm_enable_sleep_mode=true has no effect: rollout_engine=toy_local" in line
               for line in dry_run_report(asleep))  # supports_sleep=False: said, not silently dropped
    monkeypatch.setattr(ToyLocalEngine, "supports_sleep", True)
    assert compile_plan(asleep).engine.ignored == ()

    trainer = Trainer(cfg)
    metrics = trainer.train()
    engine = trainer.engine
    assert isinstance(engine, ToyCopyEngine) and engine.copy is not trainer.policy
    assert len(metrics) == 2 and all(m["train/grad_norm"] > 0 for m in metrics)
    assert engine.threads[0] == threading.current_thread().name  # step 1: nothing ahead yet
    assert engine.threads[1].startswith("rlvr-rollout")  # step 2: sampled during step 1's update
    assert engine.syncs >= 2  # after each update
    assert all("sampling/importance_sampling_ratio/mean" in m for m in metrics)  # the correction ran
    policy, copied = trainer.policy.state_dict(), engine.copy.state_dict()
    assert all(torch.equal(policy[k], copied[k]) for k in policy)  # the copy holds the last update's weights


def test_no_engine_name_is_compared_outside_rollout():
    """What an engine can do is its class's abilities (rollout/engine.py): outside rollout/ no code compares an
    engine's name (a lookup of its options by name, train/setup.py's ENGINE_OPTIONS, is no comparison)."""
    src = Path(rlvr.__file__).parent
    # == "vllm", != 'hf', rollout_engine == ..., rollout_engine in ("vllm", ...) (not: "in ROLLOUT_ENGINES", the names)
    pattern = re.compile(r"""[=!]=\s*["'](vllm|hf|vllm-server)["']|rollout_engine\s*(==|!=|(not\s+)?in\s*[(\[{])""")
    found = [f"{path.relative_to(src)}:{n}: {line.strip()}" for path in sorted(src.rglob("*.py"))
             if path.relative_to(src).parts[0] != "rollout"
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
