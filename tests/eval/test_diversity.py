"""Diversity: hand values on toy embeddings, and the real MiniLM encoder on texts."""

import math

import pytest
import torch

from rlvr.eval import group_diversity, mean_pairwise_cosine_distance


def test_pairwise_distance_by_hand():
    # e0 = (1,0), e1 = (0,1), e2 = (1,1)/√2: cos = 0, 1/√2, 1/√2 -> distances 1, 1-0.7071, 1-0.7071
    e = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    expected = (1 + 2 * (1 - 1 / math.sqrt(2))) / 3
    assert mean_pairwise_cosine_distance(e) == pytest.approx(expected, rel=1e-6)
    assert mean_pairwise_cosine_distance(torch.ones(4, 3)) == pytest.approx(0.0, abs=1e-6)


class FakeEncoder:
    def __init__(self, table):
        self.table = table

    def encode(self, texts, **kw):
        return torch.tensor([self.table[t] for t in texts])


def test_group_diversity_averages_over_groups_and_skips_singletons():
    enc = FakeEncoder({"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 0.0]})
    # group 1: a,b -> 1.0; group 2: a,c -> 0.0; group 3 has one text and is skipped
    assert group_diversity([["a", "b"], ["a", "c"], ["b"]], encoder=enc) == pytest.approx(0.5)
    assert group_diversity([["a"]], encoder=enc) is None


def test_real_encoder_ranks_paraphrases_as_less_diverse():
    pytest.importorskip("sentence_transformers", reason="needs the embed extra: pip install 'rlvr[embed]'")
    same = ["The answer is 42.", "The answer is 42.", "The answer is 42."]
    near = ["The answer is 42.", "So the result is 42.", "We get 42 as the answer."]
    far = ["The answer is 42.", "Paris is the capital of France.", "Photosynthesis needs light."]
    values = [group_diversity([g]) for g in (same, near, far)]
    assert values[0] == pytest.approx(0.0, abs=1e-5)
    assert values[0] < values[1] < values[2]
