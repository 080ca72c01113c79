"""Evaluation: diversity of responses (pass@k and benchmark runs come with their issue)."""

from rlvr.eval.diversity import group_diversity, mean_pairwise_cosine_distance

__all__ = ["group_diversity", "mean_pairwise_cosine_distance"]
