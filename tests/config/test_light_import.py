"""``import rlvr.config`` stays light: ``rlvr train --help`` and config errors must not wait for torch."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("heavy", ["transformers", "torch", "tensorboard", "wandb", "trackio", "mlflow"])
def test_importing_the_config_loads_neither_torch_nor_transformers(heavy):
    code = f"import rlvr.config, sys; print({heavy!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False", f"import rlvr.config loaded {heavy}"


LIGHT_EQUALS_REGISTRY = """
import sys
from rlvr.core import names
assert "torch" not in sys.modules, "rlvr.core.names imported torch"
light = (set(names.ADVANTAGE_ESTIMATOR_NAMES), set(names.POLICY_LOSS_NAMES), list(names.AGGREGATION_MODES))
from rlvr.core import advantages, losses
assert light[0] == set(advantages.ADVANTAGE_ESTIMATORS), (light[0], set(advantages.ADVANTAGE_ESTIMATORS))
assert light[1] == set(losses.POLICY_LOSSES), (light[1], set(losses.POLICY_LOSSES))
assert sorted(light[2]) == sorted(losses.AGGREGATIONS), (light[2], set(losses.AGGREGATIONS))
assert set(names.AGGREGATION_ALIASES.values()) <= set(losses.AGGREGATIONS)
assert all(light), light  # the source was read: every family found its names
print("ok")
"""


def test_the_light_names_are_the_registries_in_a_fresh_interpreter():
    """rlvr.core.names reads the registries' decorators from their source without torch; in a fresh interpreter
    (no test's toy registered) the names it found before torch loaded are exactly the registries' keys."""
    result = subprocess.run([sys.executable, "-c", LIGHT_EQUALS_REGISTRY], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok", result.stdout


def test_the_anchor_shapings_the_loss_knows_are_the_ones_the_config_accepts():
    from rlvr.config import build_config
    from rlvr.core import losses

    for psi in losses.ANCHOR_PSI:
        assert build_config({"model": "tiny-random", "algo": "dagrpo", "anchor_psi": psi}).dagrpo.anchor_psi == psi
