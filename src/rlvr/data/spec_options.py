"""Parse the `:key=value` options of a dataset spec such as `rg:chain_sum:size=500:seed=3`."""

from __future__ import annotations


def split_options(parts: list[str], spec: str) -> dict[str, str]:
    """{key: raw value} from ["key=value", ...]; ValueError naming the spec on a malformed or repeated key."""
    options: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"dataset spec {spec!r}: option {part!r} is not key=value; write e.g. ':seed=3'")
        if key in options:
            raise ValueError(f"dataset spec {spec!r}: option {key!r} is given twice; keep one")
        options[key] = value.strip()
    return options


def parse_value(text: str) -> int | float | bool | str:
    """'3' → 3, '0.5' → 0.5, 'true'/'false' (any case) → bool, anything else stays a string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text
