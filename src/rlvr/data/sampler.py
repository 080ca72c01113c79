"""An endless, resumable stream of dataset rows, epoch after epoch.

Epoch e is the permutation random.Random(f"{seed}:{e}").shuffle(range(num_rows)) (identity when
shuffle=False). It depends only on (seed, e) — not on the global RNG, on PYTHONHASHSEED (a str
seed is hashed with SHA-512) or on how rows were taken before — so the state is just the number of
rows consumed, and a resumed run draws exactly the rows an uninterrupted run would.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class PromptSampler:
    """take(n) returns the next n rows of the stream; n may exceed the dataset (epochs wrap)."""

    def __init__(self, rows: Sequence[dict], *, seed: int, shuffle: bool = True) -> None:
        if len(rows) == 0:
            raise ValueError("PromptSampler got no rows; load a dataset with at least one row")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed is {seed!r}; give an integer")
        self._rows = list(rows)
        self._seed = seed
        self._shuffle = shuffle
        self._position = 0
        self._order_epoch = -1
        self._order: list[int] = []

    @property
    def position(self) -> int:
        """Rows consumed so far, over all epochs."""
        return self._position

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch != self._order_epoch:
            order = list(range(len(self._rows)))
            if self._shuffle:
                random.Random(f"{self._seed}:{epoch}").shuffle(order)
            self._order, self._order_epoch = order, epoch
        return self._order

    def take(self, n: int) -> list[dict]:
        """The next n rows (shallow copies, so callers may add keys freely)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"take(n) got n={n!r}; give a non-negative integer")
        taken = []
        for _ in range(n):
            epoch, offset = divmod(self._position, len(self._rows))
            taken.append(dict(self._rows[self._epoch_order(epoch)[offset]]))
            self._position += 1
        return taken

    def state_dict(self) -> dict:
        """Everything needed to resume; seed/shuffle/num_rows guard against resuming on other data."""
        return {
            "position": self._position,
            "seed": self._seed,
            "shuffle": self._shuffle,
            "num_rows": len(self._rows),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; ValueError if it was saved for another seed, order or dataset size."""
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state))
        if missing:
            raise ValueError(f"sampler state lacks {missing}; pass a dict saved by PromptSampler.state_dict()")
        for key in ("seed", "shuffle", "num_rows"):
            if state[key] != expected[key]:
                raise ValueError(
                    f"sampler state has {key}={state[key]!r} but this sampler has {key}={expected[key]!r}; "
                    "resume with the same dataset and data seed, or start a fresh run"
                )
        position = state["position"]
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"sampler state has position={position!r}; it must be a non-negative integer")
        self._position = position
