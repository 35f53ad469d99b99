"""Trailing-window maximum, so a spike between two scrapes still shows in the peak gauge,
with the time it was sampled, so a reader can tell on which side of a session or job edge
the spike happened."""

from __future__ import annotations

from bisect import bisect_left

_COMPACT = 1024  # dropped entries kept in front before the lists are cut


class WindowMax:
    """Maximum of the values added during a trailing window of at most ``window`` seconds,
    and its stamp; each ``add`` may ask a shorter window (one that follows the scrapes).

    A monotonic queue: each value is pushed and popped at most once, so adding a sample is
    O(log n) however long the window and however fast the sampling. Of equal values the
    latest is kept, so the stamp is the last time the maximum was seen: a plateau that
    reaches into a session is dated inside it.
    """

    def __init__(self, window: float) -> None:
        if window <= 0:
            raise ValueError("peak window must be positive")
        self.window = window
        # parallel lists from ``_head`` on: times rising, values falling
        self._times: list[float] = []
        self._values: list[float] = []
        self._stamps: list[float] = []
        self._head = 0
        self._first = 0  # the index of the current maximum

    def add(self, t: float, value: float, stamp: float = 0.0, window: float | None = None
            ) -> tuple[float, float]:
        """Record ``value`` at time ``t`` (monotonic seconds; ``stamp``: the same moment as
        wall-clock time) and return the maximum over the last ``window`` seconds (at most
        the longest, ``self.window``) with its stamp."""
        times, values, stamps = self._times, self._values, self._stamps
        while len(values) > self._head and values[-1] <= value:
            times.pop()
            values.pop()
            stamps.pop()
        times.append(t)
        values.append(value)
        stamps.append(stamp)
        self._head = bisect_left(times, t - self.window, self._head)
        span = self.window if window is None else min(window, self.window)
        self._first = bisect_left(times, t - span, self._head)
        if self._head > _COMPACT and self._head * 2 > len(times):
            del times[:self._head], values[:self._head], stamps[:self._head]
            self._first -= self._head
            self._head = 0
        return values[self._first], stamps[self._first]

    def after(self) -> tuple[float, float] | None:
        """The maximum of the values added after the current maximum's sample, with its
        stamp; None when that sample is the latest. It dates what a large earlier value
        would hide: the memory of a session that starts just after a spike."""
        k = self._first + 1
        return (self._values[k], self._stamps[k]) if k < len(self._values) else None

    def clear(self) -> None:
        self._times.clear()
        self._values.clear()
        self._stamps.clear()
        self._head = self._first = 0
