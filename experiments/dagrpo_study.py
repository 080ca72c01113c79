"""The dagrpo study: `python experiments/dagrpo_study.py [--scale gpu] [--arms ...] [--seeds ...] [--dry-run]`.

The arms, seeds and options are in experiments/dagrpo.yaml; the runner (resumable) in study.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from study import run_study

if __name__ == "__main__":
    sys.exit(run_study(Path(__file__).resolve().parent / "dagrpo.yaml"))
