"""The plan and the set-up are the only readers of the config (docs/design/architecture.md).

- the step's modules (train/ but the trainer, its set-up, the plan, SFT's trainer and the dry run)
  import nothing of ``rlvr.config``, lazily either;
- ``Trainer.training_step`` and the step's metric helpers read no option (``cfg``);
- each option is read in one module (``tools/option_readers.py``), except the few listed with the reason;
- the architecture page's table of who reads each option is the one the source gives.
"""

import ast
import inspect
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "src" / "rlvr" / "train"
SET_UP = {"trainer.py", "setup.py", "plan.py", "run_plan.py", "sft.py", "dry_run.py", "algorithm_parts.py", "__init__.py"}
sys.path.insert(0, str(REPO / "tools"))
import option_readers

sys.path.remove(str(REPO / "tools"))


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in TRAIN.glob("*.py") if p.name not in SET_UP))
def test_the_steps_modules_do_not_read_the_config(module):
    config = sorted(m for m in _imports(TRAIN / module) if m == "rlvr.config" or m.startswith("rlvr.config."))
    assert not config, f"train/{module} imports {config}: take the decision in plan.py (or setup.py) instead"


def test_the_step_reads_no_option():
    from rlvr.train.metrics import StepLog, trl_step_metrics
    from rlvr.train.sft import sft_training_step
    from rlvr.train.trainer import Trainer

    for method in (Trainer.training_step, StepLog.line, trl_step_metrics, sft_training_step):
        assert "cfg" not in inspect.getsource(method), f"{method.__qualname__} reads the config; use the plan"


def test_each_option_is_read_in_one_module():
    found = option_readers.readers()
    several = {name: sorted(modules) for name, modules in found.items() if len(modules) > 1}
    unexplained = {name: modules for name, modules in several.items() if name not in option_readers.SEVERAL}
    assert not unexplained, f"options read in several modules: {unexplained}; decide each in one place"
    stale = sorted(set(option_readers.SEVERAL) - set(several))
    assert not stale, f"{stale} are read in one module now: drop them from option_readers.SEVERAL"


def test_the_finder_sees_the_plans_reads():
    found = option_readers.readers()
    assert found["beta"] == {"train/plan.py"} and found["pair_tau"] == {"train/plan.py"}
    assert found["learning_rate"] == {"train/setup.py"} and "train/setup.py" in found["reward_funcs"]
    assert set(option_readers.sections()) == set(found) | set(option_readers.DERIVED)


def test_the_finder_sees_getattr_reads_and_names_bound_to_sections():
    options = option_readers.sections()
    source = """
def step(self, cfg):
    beta = getattr(self.cfg.algorithm, "beta")
    eps = getattr(getattr(cfg, "algorithm"), "epsilon", 0.2)
    r = self.cfg.rollout
    t = getattr(r, "temperature")
    return cfg.optim.learning_rate, getattr(self, "beta"), getattr(other.algorithm, "dual_clip")
"""
    found = option_readers.reads_in(ast.parse(source), options)
    assert found == {"beta", "epsilon", "temperature", "learning_rate"}


def test_the_architecture_page_holds_the_table():
    assert option_readers.page_table() == option_readers.table(), (
        "docs/design/architecture.md's option table is out of date: run `python tools/option_readers.py --write`")
