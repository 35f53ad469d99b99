"""Trailing-window maximum, so a spike between two scrapes still shows in the peak gauge,
with the time it was sampled, so a reader can tell on which side of a session or job edge
the spike happened."""

from __future__ import annotations

from collections import deque


class WindowMax:
    """Maximum of the values added during the last ``window`` seconds, and its stamp.

    A monotonic deque: each value is pushed and popped at most once, so adding a sample is
    O(1) amortised however long the window and however fast the sampling. Of equal values
    the latest is kept, so the stamp is the last time the maximum was seen: a plateau that
    reaches into a session is dated inside it.
    """

    def __init__(self, window: float) -> None:
        if window <= 0:
            raise ValueError("peak window must be positive")
        self.window = window
        self._q: deque[tuple[float, float, float]] = deque()

    def add(self, t: float, value: float, stamp: float = 0.0) -> tuple[float, float]:
        """Record ``value`` at time ``t`` (monotonic seconds; ``stamp``: the same moment as
        wall-clock time) and return the current maximum with its stamp."""
        q = self._q
        while q and q[-1][1] <= value:
            q.pop()
        q.append((t, value, stamp))
        horizon = t - self.window
        while q[0][0] < horizon:
            q.popleft()
        return q[0][1], q[0][2]

    def after(self) -> tuple[float, float] | None:
        """The maximum of the values added after the current maximum's sample, with its
        stamp; None when that sample is the latest. It dates what a large earlier value
        would hide: the memory of a session that starts just after a spike."""
        q = self._q
        return (q[1][1], q[1][2]) if len(q) > 1 else None

    def clear(self) -> None:
        self._q.clear()
