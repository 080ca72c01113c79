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
    # the config validates against rlvr.core.names; the torch modules' registries must hold exactly those names
    from rlvr.config import build_config
    from rlvr.core import advantages, losses, names

    # register_advantage / register_policy_loss add to both sides (a test may register a toy of its own: the
    # built-ins are compared with <=)
    assert set(advantages.ADVANTAGE_ESTIMATORS) == names.ADVANTAGE_ESTIMATOR_NAMES
    assert {"grpo", "rloo", "dagrpo"} <= names.ADVANTAGE_ESTIMATOR_NAMES
    assert set(losses.POLICY_LOSSES) == names.POLICY_LOSS_NAMES
    assert {"clip"} <= names.POLICY_LOSS_NAMES
    assert set(losses.AGGREGATIONS) == set(names.AGGREGATION_MODES)
    assert set(names.AGGREGATION_ALIASES.values()) <= set(losses.AGGREGATIONS)
    # the anchor shapings the loss knows are the ones the config accepts
    for psi in losses.ANCHOR_PSI:
        assert build_config({"model": "tiny-random", "algo": "dagrpo", "anchor_psi": psi}).dagrpo.anchor_psi == psi
