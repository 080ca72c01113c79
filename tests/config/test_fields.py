"""Config fields: each has help, none can hold a secret, and each is read by the code it configures."""

import dataclasses
import re
from pathlib import Path

from rlvr.config import SECTIONS, ExperimentConfig, field_help

SRC = Path(__file__).resolve().parents[2] / "src" / "rlvr"

# Fields the code reads only through another attribute of the config (field -> that attribute,
# which must itself be read outside src/rlvr/config/, and the field itself must not be).
READ_THROUGH = {
    "loss_type": "aggregation",  # AlgorithmConfig.aggregation: loss_type with its TRL/verl aliases resolved
    # ExperimentConfig.batch_shape: the step's batch as TRL computes it from these (rlvr.config.batch)
    "steps_per_generation": "batch_shape",
    "gradient_accumulation_steps": "batch_shape",
    "generation_kwargs": "sampling_settings",  # RolloutConfig.sampling_settings: the engine's, kwargs over the options
}


def _source_outside_config() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted(SRC.rglob("*.py"))
                     if path.relative_to(SRC).parts[0] != "config")


def _is_read(name: str, source: str) -> bool:
    return re.search(rf"\.{name}\b", source) is not None


def test_every_field_has_help():
    rows = field_help()
    assert len(rows) > 30
    assert all(text for _, _, _, text in rows)


def test_no_option_can_hold_an_api_key():
    # config.yaml is written to every run directory: options may only *name* the env var of a key.
    secret_words = {"key", "keys", "secret", "password", "passwd", "token", "credential", "credentials", "auth"}
    named = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
             if secret_words & set(re.split(r"[_\W]+", f.name.lower()))]
    assert named == ["dagrpo.judge_api_key_env"]
    assert all(name.endswith("_env") for name in named)
    assert ExperimentConfig().dagrpo.judge_api_key_env == "OPENAI_API_KEY"


def test_every_field_is_read_outside_the_config():
    # an option that is validated but never read does nothing: users would set it in vain
    source = _source_outside_config()
    unread = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
              if not _is_read(READ_THROUGH.get(f.name, f.name), source)]
    assert not unread, (f"never read (as .name) outside src/rlvr/config/: {unread}; use them, remove them, "
                        "or add the attribute they are read through to READ_THROUGH")


def test_read_through_entries_are_fields_still_read_only_that_way():
    fields = {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
    source = _source_outside_config()
    assert set(READ_THROUGH) <= fields
    read_directly = [name for name in READ_THROUGH if _is_read(name, source)]
    assert not read_directly, f"{read_directly} are now read directly: drop them from READ_THROUGH"
