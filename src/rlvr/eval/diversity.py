"""Response diversity: mean pairwise cosine distance between sentence embeddings.

    diversity(group) = mean over pairs i < j of (1 − cos(e_i, e_j)),   e = all-MiniLM-L6-v2

averaged over groups (docs/algorithms/tagrpo.md, "Diagnostics"). Identical responses give 0; the value
grows as a group's responses say different things. Used during training (``diversity_steps``) and
by evaluation. Groups with fewer than two responses are skipped.
"""

from __future__ import annotations

import statistics

import torch

from rlvr.models.embedding import sentence_encoder


def mean_pairwise_cosine_distance(embeddings: torch.Tensor) -> float:
    """Mean of 1 − cos over the distinct pairs of rows of ``embeddings`` [n, d] (n ≥ 2)."""
    unit = torch.nn.functional.normalize(embeddings.float(), dim=-1)  # [n, d]
    cos = unit @ unit.T  # [n, n]
    n = cos.shape[0]
    pairs = cos[torch.triu_indices(n, n, offset=1).unbind()]  # [n(n-1)/2]
    return float((1.0 - pairs).mean())


def group_diversity(groups: list[list[str]], *, device: str = "cpu", encoder=None) -> float | None:
    """Mean pairwise cosine distance within each group of texts, averaged over groups."""
    groups = [g for g in groups if len(g) >= 2]
    if not groups:
        return None
    encoder = encoder or sentence_encoder(device)
    texts = [t for g in groups for t in g]
    embeddings = encoder.encode(texts, convert_to_tensor=True, show_progress_bar=False)  # [sum n, 384]
    values, start = [], 0
    for g in groups:
        values.append(mean_pairwise_cosine_distance(embeddings[start : start + len(g)]))
        start += len(g)
    return statistics.fmean(values)
