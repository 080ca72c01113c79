"""Where a config came from: which of its keys the user wrote, and the TRL names that made it TRL's.

Not an option (not in config.yaml, --help or comparisons): it only lets the run say, in one start-up
line, whose defaults it runs with and which of them differ from rlvr's own (``rlvr.config.defaults_line``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ConfigOrigin:
    trl_keys: tuple[str, ...] = ()  # the TRL-only names the config used (what made it TRL's)
    user_keys: frozenset[str] = field(default_factory=frozenset)  # rlvr option names the user set (after renaming)


def rlvr_default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()
