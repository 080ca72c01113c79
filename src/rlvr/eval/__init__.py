"""Evaluation: unbiased pass@k, benchmark runs (``evaluate`` with ``EvalSettings``), diversity of responses.

``evaluate``, ``EvalSettings`` and the other runner names are imported on first use: the runner pulls
in the rollout engine and the verifier pool, which a report tool that only needs ``pass_at_k`` should
not pay for.
"""

from rlvr.eval.diversity import group_diversity, mean_pairwise_cosine_distance
from rlvr.eval.passk import mean_pass_at_k, pass_at_k

_RUNNER_NAMES = ("EvalSettings", "evaluate", "format_table", "load_eval_datasets", "load_eval_rows",
                 "summarize_dataset")

__all__ = [
    "EvalSettings",
    "evaluate",
    "format_table",
    "group_diversity",
    "load_eval_datasets",
    "load_eval_rows",
    "mean_pairwise_cosine_distance",
    "mean_pass_at_k",
    "pass_at_k",
    "summarize_dataset",
]


def __getattr__(name: str):
    if name in _RUNNER_NAMES:
        from rlvr.eval import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'rlvr.eval' has no attribute {name!r}")
