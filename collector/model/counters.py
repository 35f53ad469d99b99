"""A counter's increase, reset-safe (pure): the one rule every figure from a counter uses.

A drop is a reset (an exporter or scheduler restarted): the counter counted from 0 again,
so its new value is all increase; NaN and infinite samples say nothing. Nothing is
extrapolated past the samples.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import compress, count, islice
from math import isnan
from operator import gt, sub

Samples = tuple[Sequence[int], Sequence[float]]


def rise(c0: float | None, c1: float | None) -> float | None:
    """The increase from ``c0`` to ``c1``; None where a sample is missing or NaN."""
    if c0 is None or c1 is None or c0 != c0 or c1 != c1:
        return None
    return c1 - c0 if c1 >= c0 else c1


def went_back(c0: float | None, c1: float | None) -> bool:
    """Whether the counter reset between the two samples."""
    return c0 is not None and c1 is not None and c1 < c0


def increase(times: Sequence[int], values: Sequence[float], start: int) -> float:
    """The increase after ``start`` (ms).

    The baseline is the last sample at or before ``start`` (the series existed then); with
    none, 0 (the series began inside the range, and a counter begins at 0). Computed at C
    speed: the last value minus the baseline, plus the value before each drop.
    """
    times, values = finite(times, values)
    i = bisect_right(times, start)
    points = list(values[i - 1:]) if i else [0.0, *values]
    return points[-1] - points[0] + drops(points)


def finite(times: Sequence[int], values: Sequence[float]) -> Samples:
    """The samples with a finite value (older preloads exported an empty digest as +Inf)."""
    if all(map(math.isfinite, values)):
        return times, values
    kept = [(t, v) for t, v in zip(times, values, strict=True) if math.isfinite(v)]
    return [t for t, _ in kept], [v for _, v in kept]


def drops(points: Sequence[float]) -> float:
    """The value before each drop (a reset), summed."""
    return sum(before_drops(points))


def before_drops(points: Sequence[float]) -> Iterator[float]:
    """The value before each drop, in order (a running total adds them as ``drops`` does)."""
    before, after = points[:-1], points[1:]
    return compress(before, map(gt, before, after))


def steps(samples: Samples, max_gap: int) -> tuple[list[int], list[float]]:
    """(positions, increases) from each sample to the next, at the later one's position.

    None across a gap longer than ``max_gap`` or next to a NaN: what a scrape interval
    did is unknown there.
    """
    times, values = samples
    later, after = islice(times, 1, None), islice(values, 1, None)
    rises = list(map(sub, after, values))  # the usual case: every step kept, at C speed
    if (not any(map(isnan, rises)) and min(rises, default=0.0) >= 0
            and max(map(sub, later, times), default=0) <= max_gap):
        return list(range(1, len(times))), rises
    kept = [(i, rise(v0, v1))
            for i, t0, t1, v0, v1 in zip(count(1), times, islice(times, 1, None), values,
                                         islice(values, 1, None))  # the shortest: n - 1
            if t1 - t0 <= max_gap and v0 == v0 and v1 == v1]
    return [i for i, _ in kept], [d for _, d in kept]
