"""The registered rollout engines, by what their classes say (``rlvr.rollout.engine``): a test that means "every
engine that runs here" reads these instead of listing names, so a newly registered engine is tested too."""

from __future__ import annotations

from rlvr.rollout import ROLLOUT_ENGINES, engine_class


def local_engines() -> list[str]:
    """The engines that need no optional package (``optional_package`` None: they run under ``make test``), sorted."""
    return [name for name in sorted(ROLLOUT_ENGINES) if engine_class(name).optional_package is None]
