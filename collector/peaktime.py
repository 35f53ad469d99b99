"""When a peak happened, and how well a range's peak is known (pure).

Each sample of ``dask_gpu_memory_peak_bytes`` is the maximum of the exporter's internal
samples over its trailing window W, and ``dask_gpu_memory_peak_timestamp_seconds`` says when
that maximum was sampled. Dated by that stamp rather than by the scrape, a peak counts for
the range (session, job, DAG) it happened in, whatever the scrape interval: a spike before a
session's start is not the session's, a spike just before its stop is, although only the
scrape after the stop reports it.

What the samples cannot tell: the window that reports a larger value from outside a range
also hides whatever smaller values the range held in that window. ``upper_bound`` finds how
high the range's peak may still be: at every moment of the range, no higher than the
smallest window value that covers it, and known (at most the peak found) where a window
whose maximum was dated inside the range covers it. A moment that no window covers (the
exporter or Prometheus was down, or W is shorter than the scrape interval) has no bound.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import accumulate, pairwise

from dask_metrics.collector.columns import PEAK_METRIC, PEAK_TIME_METRIC, USED_METRIC

Samples = tuple[list[int], list[float]]


def stamps_ms(peak: Samples, stamps: Samples) -> list[int | None]:
    """The time (ms) each sample of ``peak`` was taken, from the stamp (unix seconds)
    scraped with it; None where a scrape has no stamp (an exporter without the series)."""
    at = dict(zip(*stamps, strict=True))
    out: list[int | None] = []
    for t in peak[0]:
        s = at.get(t)
        out.append(None if s is None or not math.isfinite(s) or s <= 0 else round(s * 1000))
    return out


def dated_readings(metrics: Mapping[str, Samples], lo: int, hi: int,
                   rounds_at: Samples | None = None) -> Samples:
    """(times, values) sorted by time: every memory reading of one GPU dated in [lo, hi] —
    each peak sample at its stamp (a sample without one at its scrape) and each used-memory
    sample when its sampling round ended (``rounds_at``: the exporter's
    dask_gpu_exporter_last_sample_timestamp_seconds; at the scrape where it is missing,
    which dates it up to one sampling interval late). NaN values are left out."""
    readings: list[tuple[int, float]] = []
    peak = metrics.get(PEAK_METRIC)
    if peak:
        dates = stamps_ms(peak, metrics.get(PEAK_TIME_METRIC) or ([], []))
        readings += ((t if d is None else d, v)
                     for t, d, v in zip(peak[0], dates, peak[1], strict=True))
    used = metrics.get(USED_METRIC)
    if used:
        dates = stamps_ms(used, rounds_at or ([], []))
        readings += ((t if d is None else d, v)
                     for t, d, v in zip(used[0], dates, used[1], strict=True))
    kept = sorted((t, v) for t, v in readings if lo <= t <= hi and not math.isnan(v))
    return [t for t, _ in kept], [v for _, v in kept]


def reaches(peak_times: list[int], rounds: Samples | None, window: int, interval: int
            ) -> list[int]:
    """How far back (ms) each peak sample surely reaches: ``window`` (the exporter's peak
    window plus one sampling interval), or less while the exporter has not yet sampled that
    long: ``rounds`` (its dask_gpu_exporter_samples_total) x ``interval`` at that scrape,
    after a start or a restart. Without ``rounds``, ``window`` everywhere."""
    if not rounds or not rounds[0] or interval <= 0:
        return [window] * len(peak_times)
    at = dict(zip(*rounds, strict=True))
    return [window if (n := at.get(t)) is None else min(window, round(n * interval))
            for t in peak_times]


def upper_bound(peak: Samples, stamps: Samples, reach: list[int], lo: int, hi: int,
                found: float) -> float:
    """How high the memory may have been in [lo, hi] (ms), given that it was ``found`` at
    most: ``found`` when every moment lies in a window dated inside the range, else the
    largest window value that may hide a moment, ``math.inf`` where a moment lies in no
    window. The window of the peak sample at t is (t - reach, t] (``reaches``). The range is
    first narrowed to the GPU's data (from its first window's start to its last scrape):
    before and after, nothing claims to know it."""
    times, values = peak
    if not times:
        return math.inf
    lo, hi = max(lo, times[0] - reach[0]), min(hi, times[-1])
    if lo >= hi:
        return found
    longest = max(reach)
    starts = [t - r for t, r in zip(times, reach, strict=True)]
    dates = stamps_ms(peak, stamps)
    inside = [d is not None and lo <= d <= hi for d in dates]
    clean = [0, *accumulate(inside)]  # windows dated inside, counted up to each position
    short = [0, *accumulate(r < longest for r in reach)]  # windows shorter than the longest
    cuts = sorted({lo, hi, *(t for t in times if lo < t < hi),
                   *(a for a in starts if lo < a < hi)})
    bound = found
    for p, q in pairwise(cuts):
        # the windows (start, t] that cover all of (p, q]: t >= q and start <= p
        i, j = bisect_left(times, q), bisect_right(times, p + longest)
        if short[j] - short[i]:  # after a restart: look at each window
            covering = [k for k in range(i, j) if starts[k] <= p]
            if not covering:
                return math.inf
            if any(inside[k] for k in covering):
                continue
            bound = max(bound, min(values[k] for k in covering))
            continue
        if i >= j:
            return math.inf
        if clean[j] - clean[i]:
            continue  # a window whose maximum lies in the range covers it: at most found
        bound = max(bound, min(values[i:j]))
    return bound
