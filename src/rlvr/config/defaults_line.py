"""The start-up line of a run with TRL's defaults: why, the defaults rlvr's own would change, the departures.

(Apart from ``origin.py``, which the experiment config imports: this line reads the config's sections.)
"""

from __future__ import annotations

from rlvr.config.departures import trl_departures
from rlvr.config.experiment import FIELD_SECTION, SECTIONS
from rlvr.config.origin import rlvr_default
from rlvr.config.presets import TRL_DEFAULTS

# the batch options: the run's start-up line gives the step's batch as TRL computes it
_SHOWN_ELSEWHERE = ("preset", "prompts_per_step", "per_device_train_batch_size", "gradient_accumulation_steps")


def defaults_line(cfg) -> str | None:
    """One line for the start of a run with TRL's defaults: why, every default the user did not set that
    rlvr's own would change, and where the run departs from TRL 1.16 (rlvr.config.departures); None for a
    config with rlvr's defaults."""
    if cfg.run.preset != "trl":
        return None
    differ = []
    for name, value in TRL_DEFAULTS.items():
        if name in _SHOWN_ELSEWHERE or name in cfg.origin.user_keys or (name.startswith("lora_") and not cfg.model.lora_r):
            continue
        ours = rlvr_default(SECTIONS[FIELD_SECTION[name]], name)
        if ours != value:
            differ.append(f"{name}={value!r} (rlvr: {ours!r})")
    keys = cfg.origin.trl_keys
    named = ", ".join(keys[:4]) + (f", ... ({len(keys)} TRL names)" if len(keys) > 4 else "")
    why = f"it uses {named}" if keys else "preset=trl"
    departures = "; ".join(trl_departures(cfg)) or "none"
    semantics = ("plain-string prompts fed as raw text" if cfg.data.system_prompt is None
                 and cfg.data.dataset_prompt_column is None else "string questions as open-r1's [system, user] chat")
    return (f"rlvr: a TRL config ({why}): TRL 1.16's defaults and semantics apply ({semantics}, max_steps in "
            f"optimiser steps, loss_type dapo normalised as TRL does). Where rlvr's own defaults differ: "
            f"{', '.join(differ) or 'none left unset'}. Where it runs differently from TRL 1.16 (docs/from_trl.md): "
            f"{departures}. preset=rlvr keeps rlvr's")
