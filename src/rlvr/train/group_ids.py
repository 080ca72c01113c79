"""Run-wide group ids: every group gets the next number when its prompt is drawn.

Advantages are computed per group id, never from positions in the batch (docs/design/pitfalls.md #9);
the counter is saved in each checkpoint, so a resumed run numbers its groups as an uninterrupted one.
"""

from __future__ import annotations


class GroupIds:
    def __init__(self, last: int = 0):
        self.last = last  # the id given most recently (0: none yet)

    def reserve(self, count: int) -> int:
        """Take ``count`` consecutive ids; return the first."""
        first = self.last + 1
        self.last += count
        return first
