"""What a GPU's peaks are read from (pure): the peak gauge's series, its window and
how far past a range they reach, capacity changes, and the spans each job ran in."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping

from dask_metrics.collector.model.columns import (
    NEXT_PEAK_METRIC,
    NEXT_PEAK_TIME_METRIC,
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    ROUND_TIME_METRIC,
    SAMPLES_METRIC,
    TOTAL_METRIC,
    USED_METRIC,
    WINDOW_METRIC,
)
from dask_metrics.collector.model.series import Series, Timeline, join
from dask_metrics.collector.model.timespec import to_ms

DEFAULT_PEAK_WINDOW = 30.0
"""Seconds: the exporter's default trailing window of dask_gpu_memory_peak_bytes, taken for
exporters that do not say theirs (dask_gpu_exporter_peak_window_seconds)."""


LONGEST_PEAK_WINDOW = 3600.0
"""Seconds: the longest window a range is fetched past its end for (the exporter's limit)."""


PEAK_DATING = (PEAK_TIME_METRIC, NEXT_PEAK_METRIC, NEXT_PEAK_TIME_METRIC, SAMPLES_METRIC,
               ROUND_TIME_METRIC, WINDOW_METRIC)
"""The series that date the peak gauge's samples and bound what they hide (``timing``)."""


PEAK_METRICS = (PEAK_METRIC, USED_METRIC, TOTAL_METRIC, *PEAK_DATING)


Capacity = list[tuple[int, float]]
"""A GPU's total memory where it changed: (the first scrape of a value, the value)."""


def total_at(totals: Capacity, t: int) -> float | None:
    """The capacity at ``t``: the last total at or before it, else the first one after."""
    if not totals:
        return None
    i = bisect_right(totals, (t, math.inf)) - 1
    return totals[max(i, 0)][1]


def undated_sources(metrics: Mapping[str, tuple[list[int], list[float]]], since: int | None,
             peak_window: int) -> tuple[list[int], list[float]]:
    """(time, bytes) to take the peak of, for a GPU whose exporter has the peak gauge but
    does not date it: the gauge, except in the first peak window after ``since``. There the
    first gauge sample, s1, may carry a peak from before ``since``; a later one, at t,
    covers (t - window, t], whose part before ``since`` lies within s1's window, so a value
    above s1's was reached after s1, in the session: those are kept, with the raw
    used-memory samples, and the rest left out."""
    peak, used = metrics.get(PEAK_METRIC) or ([], []), metrics.get(USED_METRIC)
    if since is None:
        return peak
    cut = since + peak_window
    first, i = bisect_left(peak[0], since), bisect_left(peak[0], cut)
    carried = peak[1][first] if first < i else math.inf
    early = [(t, v) for t, v in zip(peak[0][first + 1:i], peak[1][first + 1:i], strict=True)
             if v > carried]
    if used:
        lo, hi = bisect_left(used[0], since), bisect_left(used[0], cut)
        early += zip(used[0][lo:hi], used[1][lo:hi], strict=True)
    early.sort()
    return [t for t, _ in early] + peak[0][i:], [v for _, v in early] + peak[1][i:]


def within(samples: tuple[list[int], list[float]] | None, lo: int, hi: int
            ) -> tuple[list[int], list[float]]:
    """The samples in [lo, hi], NaN left out."""
    if not samples:
        return [], []
    kept = [(t, v) for t, v in zip(*samples, strict=True) if lo <= t <= hi and v == v]
    return [t for t, _ in kept], [v for _, v in kept]


def tail_of(windows: Mapping[str, tuple[int, int]], default: int) -> int:
    """How far (ms) past a range's end its peak samples are fetched: the longest reach of
    the exporters' windows (``worker_series.peak_windows``), ``default`` where none says."""
    longest = max((reach for reach, _ in windows.values()), default=default)
    return min(longest, to_ms(LONGEST_PEAK_WINDOW))


def window_keywords(window: tuple[int, int]) -> dict[str, int]:
    """gpu_peaks' keywords for a worker's (reach, sampling interval), in ms."""
    return {"peak_window": window[0], "sample_interval": window[1]}


def exporter_series(series: Iterable[Series]) -> tuple[list[int], list[float]] | None:
    """One series of the worker's exporter (one piece per exporter process) as one."""
    pieces = [s for s in series if s.times]
    if not pieces:
        return None
    return (pieces[0].times, pieces[0].values) if len(pieces) == 1 else join(pieces)


def job_spans(activity: Timeline, max_age: int, lo: int, hi: int
           ) -> dict[str, list[tuple[int, int]]]:
    """{job: the stretches of [lo, hi] the timeline gives it}: from each scheduler scrape
    that saw it to the next scrape (at most ``max_age`` later), adjacent ones joined."""
    times = activity.times
    spans: dict[str, list[tuple[int, int]]] = {}
    for k, (state, t) in enumerate(zip(activity.states, times, strict=True)):
        a = max(t, lo)
        b = min(times[k + 1] if k + 1 < len(times) else hi, t + max_age, hi)
        if not state[0] or a >= b:
            continue
        mine = spans.setdefault(state[0], [])
        if mine and mine[-1][1] == a:
            mine[-1] = (mine[-1][0], b)
        else:
            mine.append((a, b))
    return spans
