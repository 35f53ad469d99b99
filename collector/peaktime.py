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

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from dask_metrics.collector.columns import (
    NEXT_PEAK_METRIC,
    NEXT_PEAK_TIME_METRIC,
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    USED_METRIC,
)

Samples = tuple[list[int], list[float]]


def stamps_ms(peak: Samples, stamps: Samples) -> list[int | None]:
    """The time (ms) each sample of ``peak`` was taken, from the stamp (unix seconds)
    scraped with it; None where a scrape has no stamp (an exporter without the series)."""
    times, values = stamps
    if times == peak[0]:  # scraped together, as an exporter writes them: no lookup
        found: Iterable[float | None] = values
    else:
        at = dict(zip(times, values, strict=True))
        found = map(at.get, peak[0])
    # a stamp of 0, below, infinite or NaN (every comparison False) is no time
    return [None if s is None or not 0 < s < math.inf else round(s * 1000) for s in found]


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
    after = metrics.get(NEXT_PEAK_METRIC)
    if after:
        dates = stamps_ms(after, metrics.get(NEXT_PEAK_TIME_METRIC) or ([], []))
        readings += ((d, v) for d, v in zip(dates, after[1], strict=True) if d is not None)
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


Stretch = tuple[int, int, float, int | None]
"""(start, end, maximum, when) in ms: a stretch of time whose memory was at most the maximum,
which was sampled at ``when`` (None: not dated)."""


class Cover(NamedTuple):
    """What the scrapes of one GPU say of the time before each of them: per scrape, its
    stretches (``cover`` builds it once per GPU; each range asks it with a bisection)."""

    times: list[int]
    reach: list[int]
    stretches: list[tuple[Stretch, ...]]
    longest: int  # the longest reach


def cover(metrics: Mapping[str, Samples], reach: list[int]) -> Cover:
    """The peak sample at t covers (t - reach, t], its maximum dated by its stamp; where the
    exporter also gave the largest value after that one (the next peak), the window splits
    at the peak's stamp, and the part after it is bounded by the next peak."""
    times, values = metrics[PEAK_METRIC]
    dates = stamps_ms((times, values), metrics.get(PEAK_TIME_METRIC) or ([], []))
    nexts = dict(zip(*(metrics.get(NEXT_PEAK_METRIC) or ([], [])), strict=True))
    next_dates = dict(zip(*(metrics.get(NEXT_PEAK_TIME_METRIC) or ([], [])), strict=True))
    out: list[tuple[Stretch, ...]] = []
    for t, v, d, r in zip(times, values, dates, reach, strict=True):
        after, when = nexts.get(t), next_dates.get(t)
        if d is not None and after is not None and when and math.isfinite(when):
            out.append(((t - r, d, v, d), (d, t, after, round(when * 1000))))
        else:
            out.append(((t - r, t, v, d),))
    return Cover(times, reach, out, max(reach, default=0))


def upper_bound(known: Cover, lo: int, hi: int, found: float) -> float:
    """How high the memory of one GPU may have been in [lo, hi] (ms), given that it was
    ``found`` at most: ``found`` when every moment lies in a stretch whose maximum is dated
    inside the range, else the largest stretch maximum that may hide a moment,
    ``math.inf`` where a moment lies in no stretch (see ``cover``). The range is first
    narrowed to the GPU's data (from its first window's start to its last scrape): before
    and after, nothing claims to know it."""
    times, reach = known.times, known.reach
    if not times:
        return math.inf
    lo, hi = max(lo, times[0] - reach[0]), min(hi, times[-1])
    if lo >= hi:
        return found
    # the scrapes whose windows can reach into the range: a job's span costs its own scrapes
    first, last = bisect_left(times, lo), bisect_right(times, hi + known.longest)
    spans = [(max(a, lo), min(b, hi), v, d is not None and lo <= d <= hi)
             for stretches in known.stretches[first:last] for a, b, v, d in stretches]
    spans = [x for x in spans if x[0] < x[1]]
    cuts = sorted({lo, hi, *(a for a, *_ in spans), *(b for _, b, *_ in spans)})
    opening = sorted(range(len(spans)), key=lambda k: spans[k][0])
    closing = sorted(range(len(spans)), key=lambda k: spans[k][1])
    active: list[tuple[float, int]] = []  # (value, span): a heap, ended spans left in
    clean = 0
    ended: set[int] = set()
    nxt = done = 0
    bound = found
    for p in cuts[:-1]:  # (p, next cut] is covered by the spans with start <= p < end
        while nxt < len(opening) and spans[opening[nxt]][0] <= p:
            k = opening[nxt]
            heapq.heappush(active, (spans[k][2], k))
            clean += spans[k][3]
            nxt += 1
        while done < len(closing) and spans[closing[done]][1] <= p:
            k = closing[done]  # opened already: it starts before it ends
            ended.add(k)
            clean -= spans[k][3]
            done += 1
        while active and active[0][1] in ended:
            heapq.heappop(active)
        if not active:
            return math.inf  # a moment no window covers
        if clean:
            continue  # a stretch whose maximum lies in the range covers it: at most found
        bound = max(bound, active[0][0])
    return bound
