"""Per-row sampling seeds, so an evaluation sample depends on its problem, not on its batch.

Sample j of problem p is drawn with its own ``torch.Generator`` seeded by
``row_seed(seed, dataset, p's id, j)`` (``DecodeEngine.generate(row_seeds=...)``): the tokens do not
change with the batch size, the other problems in the batch, or resuming. Residual dependence on
the batch: left-padding to a different width can change logits in the last float bits, which flips
a draw only when it falls on a CDF boundary.
"""

from __future__ import annotations

import hashlib


def row_seed(seed: int, dataset: str, problem_id: str, sample: int) -> int:
    """A 63-bit seed from (seed, dataset, problem id, sample index) alone (SHA-256, stable across runs)."""
    key = "\x1f".join((str(seed), dataset, problem_id, str(sample))).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1
