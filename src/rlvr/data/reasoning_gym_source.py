"""`rg:NAME[:key=value...]`: rows from a seeded reasoning-gym generator.

Example: `rg:chain_sum:size=500:seed=3:min_terms=2:max_terms=2:max_digits=1`.
size defaults to 1000 and seed to 0; every other key is a field of the generator's config
dataclass, with values parsed as int, float, bool or string.
Rows: id "rg:<name>:<seed>:<index>", prompt = question, answer = answer, `metadata` kept (it
names the generator, which reward functions can use to call reasoning-gym's own scorer).
"""

from __future__ import annotations

import dataclasses
import difflib

from rlvr.data.rows import normalize_rows
from rlvr.data.spec_options import parse_value, split_options

RG_PREFIX = "rg:"
RG_DEFAULT_SIZE = 1000
RG_DEFAULT_SEED = 0


def _registry() -> dict:
    import reasoning_gym  # noqa: F401  (importing registers every generator)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def _check_name(name: str, registry: dict, spec: str) -> None:
    if name in registry:
        return
    close = difflib.get_close_matches(name, sorted(registry), n=5, cutoff=0.5)
    hint = f"close names: {', '.join(close)}" if close else f"e.g. {', '.join(sorted(registry)[:5])}"
    raise ValueError(
        f"dataset spec {spec!r}: unknown reasoning-gym generator {name!r}; {hint} "
        f"({len(registry)} generators in reasoning_gym.factory.DATASETS)"
    )


def _int_option(options: dict, key: str, default: int, spec: str, minimum: int) -> int:
    value = options.pop(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"dataset spec {spec!r}: option {key}={value!r} must be an integer >= {minimum}")
    return value


def _create(name: str, config_cls: type, dataset_cls: type, kwargs: dict, spec: str):
    # Build the config ourselves (this is what reasoning_gym.create_dataset does) so that a bad
    # option is reported with the list of valid ones.
    valid = sorted(field.name for field in dataclasses.fields(config_cls))
    for key in kwargs:
        if key not in valid:
            raise ValueError(
                f"dataset spec {spec!r}: generator {name!r} has no option {key!r}; valid options: {', '.join(valid)}"
            )
    try:
        config = config_cls(**kwargs)
        if hasattr(config, "validate"):
            config.validate()
        return dataset_cls(config=config)
    except (AssertionError, ValueError, TypeError) as error:
        raise ValueError(
            f"dataset spec {spec!r}: reasoning-gym rejected the options {kwargs}: {error or type(error).__name__}; "
            "fix the option values"
        ) from error


def load_reasoning_gym(spec: str) -> list[dict]:
    """Normalized rows for an `rg:NAME[:key=value...]` spec."""
    if not spec.startswith(RG_PREFIX):
        raise ValueError(f"dataset spec {spec!r} does not start with {RG_PREFIX!r}; write e.g. 'rg:chain_sum'")
    name, *option_parts = spec[len(RG_PREFIX) :].split(":")
    name = name.strip()
    if not name:
        raise ValueError(f"dataset spec {spec!r} names no generator; write e.g. 'rg:chain_sum:size=500'")
    options = {key: parse_value(raw) for key, raw in split_options(option_parts, spec).items()}
    registry = _registry()
    _check_name(name, registry, spec)
    size = _int_option(options, "size", RG_DEFAULT_SIZE, spec, minimum=1)
    seed = _int_option(options, "seed", RG_DEFAULT_SEED, spec, minimum=0)
    dataset_cls, config_cls = registry[name][:2]
    dataset = _create(name, config_cls, dataset_cls, {**options, "size": size, "seed": seed}, spec)
    raw_rows = [
        {
            "id": f"rg:{name}:{seed}:{index}",
            "prompt": entry["question"],
            "answer": entry["answer"],
            "metadata": entry["metadata"],
        }
        for index, entry in enumerate(dataset)
    ]
    return normalize_rows(raw_rows, f"{RG_PREFIX}{name}")
