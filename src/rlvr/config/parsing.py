"""Build a config from YAML files and ``key=value`` pairs, with typed parsing and clear errors."""

from __future__ import annotations

import os
import types
import typing
from typing import Any

import yaml

from rlvr.config.experiment import FIELD_SECTION, SECTIONS, ExperimentConfig, configured_world_size, unknown_key_error
from rlvr.config.fields import _fail
from rlvr.config.origin import ConfigOrigin
from rlvr.config.presets import DEFAULTS, PRESETS
from rlvr.config.python_objects import split_python_objects
from rlvr.config.sections import AlgorithmConfig, RolloutConfig
from rlvr.config.tagrpo import TAGRPOConfig
from rlvr.config.trl_names import (
    ACCEPTED,
    NOT_IMPLEMENTED,
    RENAMED,
    TRANSLATED,
    TRL_BOOL_KEYS,
    TRL_LIST_KEYS,
    detect_preset,
    translate_trl_keys,
)
from rlvr.config.yaml_file import read_config_file

# the words a boolean option takes after ``--flag`` (HfArgumentParser's); a bare ``--flag`` is true
BOOL_WORDS = {"true": "true", "false": "false", "yes": "true", "no": "false", "1": "true", "0": "false"}


def flatten_yaml(doc: Any, source: str, lines: dict[tuple[str, ...], int] | None = None) -> dict[str, Any]:
    """Accept a YAML mapping that is flat or nested by section; return flat keys.

    A key given twice (flat and in a section, or in two sections) is refused, naming both places;
    ``lines``: the line of each top-level key and section key (``rlvr.config.yaml_file.ConfigFile``).
    """
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: the config file must be a mapping of option: value")
    flat: dict[str, Any] = {}
    places: dict[str, tuple[str, ...]] = {}
    for key, value in doc.items():
        nested = key in SECTIONS and isinstance(value, dict)
        for name, item in (value.items() if nested else [(key, value)]):
            place = (key, name) if nested else (key,)
            if name in flat:
                raise ValueError(f"{source}: {name} is given twice, as {_place(places[name], lines)} and "
                                 f"{_place(place, lines)}; keep one")
            flat[name], places[name] = item, place
    return flat


def _place(place: tuple[str, ...], lines: dict[tuple[str, ...], int] | None) -> str:
    """``run: max_steps`` (line 3), or ``max_steps`` (line 5): where a key was written."""
    line = (lines or {}).get(place)
    return f"`{': '.join(map(str, place))}`" + (f" (line {line})" if line else "")


# The YAML spellings of null that an Optional option takes on the command line (``epsilon_high=null``).
NULL_WORDS = ("", "null", "Null", "NULL", "~")


def parse_cli_value(key: str, raw: str) -> Any:
    """Parse a command-line string for ``key`` into the field's type.

    Text options (``str``, ``str | None``) take the text as given: YAML would cut
    ``instruction=Finish with #### N`` at `` #`` and read ``system_prompt=Answer: briefly`` as a
    mapping. A list of strings is split at commas (``[a, b]`` is still read as YAML); the words in
    ``NULL_WORDS`` mean None for Optional options; numbers, booleans and number lists are YAML.
    """
    if key not in FIELD_SECTION:
        raise unknown_key_error(key)
    hint = _field_type(key)
    if _is_optional(hint) and raw.strip() in NULL_WORDS:
        return None
    base = _base_type(hint)
    if base is str:
        return raw
    if base == list[str] and not raw.lstrip().startswith("["):
        return [part.strip() for part in raw.split(",") if part.strip()]
    try:
        value = yaml.safe_load(raw) if raw != "" else None
    except yaml.YAMLError:
        raise ValueError(f"{key}={raw!r} is not a valid {_type_name(base)}; see `rlvr train --help`") from None
    if _is_list(hint) and isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return value


def pairs_from_cli(tokens: list[str]) -> list[str]:
    """Command-line options as ``key=value`` pairs, in every form TRL's HfArgumentParser takes too:
    ``key=value``, ``--key value``, ``--key=value``; for a boolean option a bare ``--key`` (true),
    ``--key false`` or ``--no_key`` (false); for a list option its values one after another (``--report_to tensorboard wandb``,
    joined with commas).

    Dashes in names are underscores (``--max-steps`` is ``max_steps``).
    """
    pairs, i = [], 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            if "=" not in token:
                raise ValueError(f"expected key=value or --key value, got {token!r} (e.g. max_steps=10)")
            key, raw = token.split("=", 1)
            pairs.append(f"{key.strip().replace('-', '_')}={raw}")
            continue
        name = token[2:]
        if "=" in name:
            key, raw = name.split("=", 1)
            pairs.append(f"{key.replace('-', '_')}={raw}")
            continue
        key = name.replace("-", "_")
        if key.startswith("no_") and key not in KNOWN_KEYS and _is_bool_key(key[3:]):
            pairs.append(f"{key[3:]}=false")  # HfArgumentParser's --no_bf16
            continue
        if _is_bool_key(key):  # --bf16, --bf16 false, --use_peft
            if i < len(tokens) and tokens[i].lower() in BOOL_WORDS:
                pairs.append(f"{key}={BOOL_WORDS[tokens[i].lower()]}")
                i += 1
            else:
                pairs.append(f"{key}=true")
            continue
        values = []
        while i < len(tokens) and _is_value(tokens[i]) and (not values or _is_list_key(key)):
            values.append(tokens[i])
            i += 1
        if not values:
            raise ValueError(f"--{name} needs a value (e.g. --{name} VALUE or --{name}=VALUE)")
        pairs.append(f"{key}={','.join(values)}")
    return pairs


def _is_value(token: str) -> bool:
    """A token that is an option's value, not the next option (``--key`` or ``key=value``)."""
    if token.startswith("--"):
        return False
    key, sep, _ = token.partition("=")
    return not (sep and key.replace("-", "_") in KNOWN_KEYS)


KNOWN_KEYS = frozenset(FIELD_SECTION) | set(RENAMED) | set(TRANSLATED) | set(ACCEPTED) | set(NOT_IMPLEMENTED)


def _is_bool_key(key: str) -> bool:
    key = RENAMED.get(key, key)
    if key in FIELD_SECTION:
        return _base_type(_field_type(key)) is bool
    return key in TRL_BOOL_KEYS


def _is_list_key(key: str) -> bool:
    key = RENAMED.get(key, key)
    if key in FIELD_SECTION:
        return _is_list(_field_type(key)) or key in ("lora_target_modules", "lora_modules_to_save")
    return key in TRL_LIST_KEYS


def build_config(overrides: dict[str, Any], *, apply_preset: bool = True) -> ExperimentConfig:
    """Build a validated config from flat overrides (presets applied under the overrides).

    TRL's names are taken (``model_name_or_path``, ``dataset_name``, ``use_peft``, ...) and TRL
    options rlvr does not implement refused, all at once (``rlvr.config.trl_names``); a config that
    uses a name only TRL has gets TRL's defaults (``preset=trl``) unless it says ``preset=rlvr``.
    From Python, ``reward_funcs`` may hold callables and ``data`` a list of row dicts or a
    ``datasets.Dataset``: the config records their labels, ``cfg.python`` the objects
    (``rlvr.config.python_objects``).
    """
    fields = set(FIELD_SECTION)
    preset, trl_keys = detect_preset(overrides, fields)
    if preset not in DEFAULTS:
        _fail("preset", preset, f"choose one of {sorted(DEFAULTS)}")
    overrides = translate_trl_keys(dict(overrides), fields)
    generation_batch_size = overrides.pop("generation_batch_size", None)
    overrides, python = split_python_objects(overrides)
    for key in overrides:
        if key not in fields:
            raise unknown_key_error(key)
    algo = overrides.get("algo", AlgorithmConfig.algo)
    if algo not in PRESETS:
        _fail("algo", algo, f"choose one of {sorted(PRESETS)}")
    defaults = {**DEFAULTS[preset], **PRESETS[algo]} if apply_preset else {"preset": preset}
    merged = {**defaults, **overrides}
    if generation_batch_size is not None and not _generation_batch_as_derived(generation_batch_size, merged, overrides):
        merged["prompts_per_step"] = _prompts_from_generation_batch(generation_batch_size, merged, overrides)
    per_section: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in merged.items():
        per_section[FIELD_SECTION[key]][key] = _coerce(key, value)
    origin = ConfigOrigin(trl_keys=tuple(trl_keys), user_keys=frozenset(overrides))
    return ExperimentConfig(**{name: SECTIONS[name](**kw) for name, kw in per_section.items()}, python=python,
                            origin=origin)


def _generation_batch_as_derived(generation_batch_size: Any, merged: dict[str, Any], given: dict[str, Any]) -> bool:
    """True when ``generation_batch_size`` is what TRL derives from the other batch keys, as
    ``GRPOConfig(...).to_dict()`` writes both it and ``steps_per_generation``: then it says nothing more."""
    per_device, steps = merged.get("per_device_train_batch_size"), given.get("steps_per_generation")
    if per_device is None or steps is None:
        return False
    return generation_batch_size == per_device * steps * configured_world_size(merged.get("nproc", 1))


def _prompts_from_generation_batch(generation_batch_size: Any, merged: dict[str, Any], given: dict[str, Any]) -> int:
    """TRL's generation_batch_size (completions per step) as rlvr's prompts_per_step (whole prompts)."""
    if not isinstance(generation_batch_size, int) or isinstance(generation_batch_size, bool) or generation_batch_size < 1:
        _fail("generation_batch_size", generation_batch_size, "use a positive number of completions per step")
    if given.get("steps_per_generation") is not None:
        _fail("generation_batch_size", generation_batch_size, "TRL takes generation_batch_size or "
              "steps_per_generation, not both (unless it is per_device_train_batch_size x processes x "
              "steps_per_generation, as TRL derives it): drop one")
    tagrpo = TAGRPOConfig(**{k: v for k, v in merged.items() if FIELD_SECTION[k] == "tagrpo"})
    per_prompt = _coerce("num_generations", merged.get("num_generations", RolloutConfig.num_generations))
    per_prompt *= tagrpo.responses_per_prompt_factor
    if generation_batch_size % per_prompt:
        _fail("generation_batch_size", generation_batch_size, f"completions per step must be whole prompts of "
              f"{per_prompt} completions (num_generations; TRL's rule)")
    prompts = generation_batch_size // per_prompt
    if given.get("prompts_per_step") not in (None, prompts):
        _fail("generation_batch_size", generation_batch_size, f"that is {prompts} prompts per step, but "
              f"prompts_per_step={given['prompts_per_step']}: give one of the two")
    return prompts


def _field_type(key: str) -> Any:
    cls = SECTIONS[FIELD_SECTION[key]]
    return typing.get_type_hints(cls)[key]


def _base_type(hint: Any) -> Any:
    """``X`` for ``X | None``, else the hint itself."""
    return next(a for a in typing.get_args(hint) if a is not type(None)) if _is_optional(hint) else hint


def _type_name(kind: Any) -> str:
    names = {int: "integer", float: "number", bool: "boolean (true or false)"}
    if dict in (kind, typing.get_origin(kind)):
        return "mapping (YAML or JSON, e.g. {enable_thinking: false})"
    if typing.get_origin(kind) is list:
        return f"list of {names.get(typing.get_args(kind)[0], 'values')}s (comma-separated or [a, b])"
    return names.get(kind, "value")


def _is_list(hint: Any) -> bool:
    args = [a for a in typing.get_args(hint) if a is not type(None)] if _is_optional(hint) else [hint]
    return any(typing.get_origin(a) is list for a in args)


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _coerce(key: str, value: Any) -> Any:
    """Check ``value`` against the field's type; convert lossless cases (int → float, str or number → list)."""
    hint = _field_type(key)
    if value is None:
        if _is_optional(hint):
            return None
        raise ValueError(f"{key} cannot be null; give a value (see `rlvr train --help`)")
    base = _base_type(hint)
    origin = typing.get_origin(base)
    if dict in (base, origin):  # chat_template_kwargs: keys are template variable names
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise TypeError(f"{key} must be a mapping of names to values, e.g. {{enable_thinking: false}}, "
                            f"got {value!r}")
        return dict(value)
    if origin is list:
        (item,) = typing.get_args(base)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (int, float)):  # reward_weights=1 (CLI or YAML) is the list [1]
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{key} must be a list (YAML list or comma-separated), got {value!r}")
        return [_coerce_scalar(key, item, v) for v in value]
    return _coerce_scalar(key, base, value)


def _coerce_scalar(key: str, kind: type, value: Any) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"{key} must be true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():  # from a comma list
            return int(value)
        raise TypeError(f"{key} must be an integer, got {value!r}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 3e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise TypeError(f"{key} must be a number, got {value!r}")
    if kind is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise TypeError(f"{key} must be a string, got {value!r}")
    raise AssertionError(f"unsupported field type {kind} for {key}")


def load_config(config_file: str | None, cli_pairs: list[str]) -> ExperimentConfig:
    """Resolve the experiment config from an optional YAML file and ``key=value`` pairs."""
    overrides: dict[str, Any] = {}
    if config_file:
        file = read_config_file(config_file)
        doc = file.doc
        if isinstance(doc, dict) and "env" in doc:
            _set_environment(doc.pop("env"), config_file)
        overrides.update(flatten_yaml(doc, config_file, file.lines))
    given = {}
    for pair in cli_pairs:
        if "=" not in pair:
            raise ValueError(f"expected key=value, got {pair!r} (e.g. max_steps=10)")
        key, raw = pair.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        given[key] = parse_cli_value(key, raw) if key in FIELD_SECTION else _yaml_or_text(raw)
    return build_config({**_without_turned_off(overrides, given), **given})


# a command-line value that turns a feature off -> the keys that only matter for that feature
TURNED_OFF = {"eval_strategy": ("no", ("eval_steps", "eval_data"))}


def _without_turned_off(from_file: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The file's options less those of a feature the command line turned off (``--eval_strategy no`` over a
    file with ``eval_steps: 50``: the file's eval_steps is unused, not an error)."""
    dropped = {key for switch, (off, keys) in TURNED_OFF.items()
               if str(given.get(switch, "")).lower() == off for key in keys if key not in given}
    return {key: value for key, value in from_file.items() if key not in dropped}


def _set_environment(env: Any, source: str) -> None:
    """A recipe's ``env:`` mapping, set in the environment as TRL's parser does (``CUDA_VISIBLE_DEVICES: 0``)."""
    if not isinstance(env, dict):
        raise ValueError(f"{source}: `env` must be a mapping of environment variables to values, got {env!r}")
    for name, value in env.items():
        os.environ[str(name)] = str(value)


def _yaml_or_text(raw: str) -> Any:
    """A value for a key that is not rlvr's (a TRL name): YAML's reading (true, 16, 1e-6), else the text."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
