"""Trailing-window maximum, so a spike between two scrapes still shows in the peak gauge."""

from __future__ import annotations

from collections import deque


class WindowMax:
    """Maximum of the values added during the last ``window`` seconds.

    A monotonic deque: each value is pushed and popped at most once, so adding a sample is
    O(1) amortised however long the window and however fast the sampling.
    """

    def __init__(self, window: float) -> None:
        if window <= 0:
            raise ValueError("peak window must be positive")
        self.window = window
        self._q: deque[tuple[float, float]] = deque()

    def add(self, t: float, value: float) -> float:
        """Record ``value`` at time ``t`` (monotonic seconds) and return the current max."""
        q = self._q
        while q and q[-1][1] <= value:
            q.pop()
        q.append((t, value))
        horizon = t - self.window
        while q[0][0] < horizon:
            q.popleft()
        return q[0][1]

    def clear(self) -> None:
        self._q.clear()
