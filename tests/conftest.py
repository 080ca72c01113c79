"""``tests`` is this folder, whatever else is installed.

verl installs a top-level package named ``tests`` into site-packages. A regular package found there wins over this
folder (a namespace package, no ``__init__.py``) when nothing has imported ``tests`` yet, so ``from tests.helpers
import ...`` failed in a subset of the suite (``pytest tests/data`` alone: its packages import ``tests.helpers``
before any module of the root does). pytest loads this file first: it makes ``tests`` this folder.
"""

import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent

if [str(HERE)] != [str(Path(p).resolve()) for p in getattr(sys.modules.get("tests"), "__path__", [])]:
    package = types.ModuleType("tests")
    package.__path__ = [str(HERE)]
    sys.modules["tests"] = package
