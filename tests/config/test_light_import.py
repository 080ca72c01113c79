"""``import rlvr.config`` stays light: ``rlvr train --help`` and config errors must not wait for torch."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("heavy", ["transformers", "torch", "tensorboard", "wandb", "trackio", "mlflow"])
def test_importing_the_config_loads_neither_torch_nor_transformers(heavy):
    code = f"import rlvr.config, sys; print({heavy!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False", f"import rlvr.config loaded {heavy}"


def test_the_light_names_are_the_ones_their_owners_use():
    # the config validates against rlvr.core.names; the torch modules must accept exactly those names
    from rlvr.core import advantages, losses, names

    assert tuple(advantages.ADVANTAGE_ESTIMATORS) == names.ADVANTAGE_ESTIMATOR_NAMES
    assert advantages.SCALE_REWARDS is names.SCALE_REWARDS
    assert losses.IMPORTANCE_LEVELS is names.IMPORTANCE_LEVELS
    assert losses.resolve_aggregation is names.resolve_aggregation
