"""The step's objects hold no config (docs/design/architecture.md, "Who decides each option").

The config is compiled at set-up into the plan and the phases' settings; below that, nothing keeps the
config: walking every object the step uses (the plan, the rollout, reward, DaGRPO and update phases, the
engine, the training eval), through attributes, dataclass fields, lists, tuples, sets, dicts, bound methods,
partials and closures, finds no ``ExperimentConfig`` and no section of one. (The source check,
``tests/test_option_readers.py``, sees ``cfg.x`` and ``getattr`` reads; this one sees a config handed over
and kept, as ``self.options = cfg``.)
"""

from __future__ import annotations

import dataclasses
import functools
import types

import pytest
import torch

from rlvr.config import SECTIONS, ExperimentConfig, build_config
from rlvr.train.trainer import Trainer
from tests.train.conftest import tiny_overrides

CONFIG_TYPES = (ExperimentConfig, *SECTIONS.values())
# what the step runs through (Trainer.training_step and the phases it calls)
STEP_OBJECTS = ("plan", "generation", "generate_groups", "rewarder", "dagrpo", "update", "engine", "evaluation",
                "grad_spikes", "prompt_builder", "group_ids")
ATOMS = (str, bytes, int, float, bool, complex, type(None), torch.Tensor, torch.dtype, torch.device, type,
         types.ModuleType, types.BuiltinFunctionType)


def _skipped(obj) -> bool:
    """Leaves not walked into: a model's parameters and a tokenizer's vocabulary hold no config."""
    from transformers import PreTrainedTokenizerBase

    return isinstance(obj, (torch.nn.Module, PreTrainedTokenizerBase, torch.optim.Optimizer))


def _children(obj):
    """(label, child) pairs of one object."""
    if isinstance(obj, dict):
        return [(f"[{key!r}]", value) for key, value in obj.items()] + [(f"<key {key!r}>", key) for key in obj]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"[{i}]", value) for i, value in enumerate(obj)]
    if isinstance(obj, types.MethodType):
        return [(".__self__", obj.__self__), (".__func__", obj.__func__)]
    if isinstance(obj, functools.partial):
        return [(".func", obj.func), (".args", obj.args), (".keywords", obj.keywords)]
    if isinstance(obj, types.FunctionType):  # its closure (a lambda keeping cfg), not its module's globals
        return [(f".<closure {name}>", cell.cell_contents) for name, cell in
                zip(obj.__code__.co_freevars, obj.__closure__ or (), strict=True) if _filled(cell)]
    out = []
    if dataclasses.is_dataclass(obj):
        out += [(f".{f.name}", getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    if hasattr(obj, "__dict__"):
        out += [(f".{name}", value) for name, value in vars(obj).items()]
    for name in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, name):
            out.append((f".{name}", getattr(obj, name)))
    return out


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def config_paths(roots: dict) -> list[str]:
    """The paths (``update.options``, ``rewarder.funcs[0].<closure cfg>``) at which a config object is held."""
    found, seen = [], set()
    stack = [(name, obj) for name, obj in roots.items()]
    while stack:
        path, obj = stack.pop()
        if isinstance(obj, CONFIG_TYPES):
            found.append(f"{path} ({type(obj).__name__})")
            continue
        if isinstance(obj, ATOMS) or id(obj) in seen or _skipped(obj):
            continue
        seen.add(id(obj))
        stack.extend((path + label, child) for label, child in _children(obj))
    return sorted(found)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, request):
    run = tmp_path_factory.mktemp("objects")
    path = run / "reward.py"
    path.write_text("def alternating(prompts, completions, **kw):\n    return [float(i % 2) for i in "
                    "range(len(completions))]\n")
    cfg = build_config(tiny_overrides(run / "run", max_steps=1, prompts_per_step=2, num_generations=4,
                                      max_completion_length=8, reward_funcs=[f"{path}:alternating"]))
    trainer = Trainer(cfg)
    trainer.train()
    trainer.test_cfg = cfg  # (the walks below leave this attribute out: the test's own handle on the config)
    return trainer


def step_objects(trainer) -> dict:
    return {name: getattr(trainer, name) for name in STEP_OBJECTS}


def trainer_objects(trainer) -> dict:
    """Every attribute of the Trainer once set-up is done (the test's own handle on the config left out)."""
    return {name: value for name, value in vars(trainer).items() if name != "test_cfg"}


@pytest.mark.slow
def test_the_steps_objects_hold_no_config(trainer):
    roots = step_objects(trainer)
    assert roots["plan"] is not None and roots["update"] is not None and roots["engine"] is not None
    assert config_paths(roots) == []


@pytest.mark.slow
def test_the_trainer_holds_no_config_after_set_up(trainer):
    """Issue 51: nothing the Trainer keeps reaches the config once set-up is done (TRL's evaluation reads its data
    and builds its rewarder from decisions made at set-up: ``eval_rows``, ``rewarder_recipe``)."""
    roots = trainer_objects(trainer)
    assert {"plan", "eval_rows", "rewarder_recipe", "checkpoints", "logs"} <= set(roots)
    assert config_paths(roots) == []


@pytest.mark.slow
def test_the_walk_finds_a_config_kept_anywhere(trainer, monkeypatch):
    """The check can fail: a config kept as an attribute, in a list or dict, in a closure or by a bound method."""
    cfg = trainer.test_cfg
    monkeypatch.setattr(trainer.update, "options", cfg, raising=False)
    monkeypatch.setattr(trainer.rewarder, "extra", [{"settings": cfg.algorithm}], raising=False)
    monkeypatch.setattr(trainer.generation, "hook", lambda: cfg.rollout, raising=False)

    class Keeper:
        def __init__(self):
            self.kept = cfg.run

        def method(self):
            return None

    monkeypatch.setattr(trainer.engine, "callback", Keeper().method, raising=False)
    assert config_paths(step_objects(trainer)) == [
        "engine.callback.__self__.kept (RunConfig)",
        "generation.hook.<closure cfg> (ExperimentConfig)",
        "rewarder.extra[0]['settings'] (AlgorithmConfig)",
        "update.options (ExperimentConfig)",
    ]
    # the Trainer's walk finds each of them too (by whichever of its attributes reaches it first)
    found = config_paths(trainer_objects(trainer))
    assert sorted(path.rsplit(" (", 1)[1] for path in found) == [
        "AlgorithmConfig)", "ExperimentConfig)", "ExperimentConfig)", "RunConfig)"], found
