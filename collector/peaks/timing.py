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
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from dask_metrics.collector.model.columns import (
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
    inf = math.inf
    # a stamp of 0, below, infinite or NaN (every comparison False) is no time
    return [None if s is None or not 0 < s < inf else round(s * 1000)
            for s in aligned(stamps, peak[0])]


def peak_dates(metrics: Mapping[str, Samples]) -> list[int | None]:
    """``stamps_ms`` of a GPU's peak samples: what ``dated_readings`` and ``cover`` both
    need, computed once by a caller that asks both."""
    return stamps_ms(metrics[PEAK_METRIC], metrics.get(PEAK_TIME_METRIC) or ([], []))


def dated_readings(metrics: Mapping[str, Samples], lo: int, hi: int,
                   rounds_at: Samples | None = None,
                   dates: list[int | None] | None = None,
                   used_dates: list[int | None] | None = None) -> Samples:
    """(times, values) sorted by time: every memory reading of one GPU dated in [lo, hi] —
    each peak sample at its stamp (a sample without one at its scrape) and each used-memory
    sample when its sampling round ended (``rounds_at``: the exporter's
    dask_gpu_exporter_last_sample_timestamp_seconds; at the scrape where it is missing,
    which dates it up to one sampling interval late). NaN values are left out. ``dates``:
    ``peak_dates(metrics)``, and ``used_dates`` those of the used-memory samples
    (``stamps_ms(used, rounds_at)``: one worker's GPUs share them), if the caller has them."""
    readings: list[tuple[int, float]] = []
    peak = metrics.get(PEAK_METRIC)
    if peak:
        stamped = peak_dates(metrics) if dates is None else dates
        readings += [(t if d is None else d, v)
                     for t, d, v in zip(peak[0], stamped, peak[1], strict=True)]
    after = metrics.get(NEXT_PEAK_METRIC)
    if after:
        stamped = stamps_ms(after, metrics.get(NEXT_PEAK_TIME_METRIC) or ([], []))
        readings += [(d, v) for d, v in zip(stamped, after[1], strict=True) if d is not None]
    used = metrics.get(USED_METRIC)
    if used:
        stamped = stamps_ms(used, rounds_at or ([], [])) if used_dates is None else used_dates
        readings += [(t if d is None else d, v)
                     for t, d, v in zip(used[0], stamped, used[1], strict=True)]
    kept = sorted([r for r in readings if lo <= r[0] <= hi and r[1] == r[1]])  # NaN != NaN
    return [t for t, _ in kept], [v for _, v in kept]


def reaches(peak_times: list[int], rounds: Samples | None, window: int, interval: int,
            windows: Samples | None = None) -> list[int]:
    """How far back (ms) each peak sample surely reaches: its exporter's peak window at that
    scrape (``windows``: dask_gpu_exporter_peak_window_seconds, which follows the scrapes)
    plus one sampling ``interval``, ``window`` where a scrape does not say; or less while
    the exporter has not yet sampled that long: ``rounds`` (its
    dask_gpu_exporter_samples_total) x ``interval`` at that scrape, after a start or a
    restart."""
    said = aligned(windows, peak_times)
    # a window that is no positive number says as little as a missing one
    full = [window if w is None or not 0 < w < math.inf else round(w * 1000) + interval
            for w in said]
    if not rounds or not rounds[0] or interval <= 0:
        return full
    # from ``enough`` rounds on the exporter has sampled for a whole window (half a ms to
    # spare for round()); a count that is no number says as little as a missing one
    return [r if n is None or n >= (r + 0.5) / interval or not math.isfinite(n)
            else min(r, round(n * interval)) for r, n in zip(full, aligned(rounds, peak_times),
                                                            strict=True)]


def aligned(samples: Samples | None, times: list[int]) -> list[float | None]:
    """The value of ``samples`` at each of ``times`` (None where it has none): its own
    values where they were scraped together, as an exporter's series are."""
    if not samples:
        return [None] * len(times)
    if samples[0] == times:
        return samples[1]
    return list(map(dict(zip(*samples, strict=True)).get, times))


Stretch = tuple[int, int, float, int | None]
"""(start, end, maximum, when) in ms: a stretch of time whose memory was at most the maximum,
which was sampled at ``when`` (None: not dated)."""


class Cover(NamedTuple):
    """What the scrapes of one GPU say of the time before each of them: per scrape, its
    stretches (``cover`` builds it once per GPU; each range asks it with a bisection), and
    what most ranges need of them alone: the time they cover together, [low, high) (empty
    where low >= high), and their largest maximum."""

    times: list[int]
    reach: list[int]
    stretches: list[tuple[Stretch, ...]]
    longest: int  # the longest reach
    lows: list[int]
    highs: list[int]
    tops: list[float]
    numbers: bool  # no maximum is NaN: a slice of tops has a largest


def cover(metrics: Mapping[str, Samples], reach: list[int],
          dates: list[int | None] | None = None) -> Cover:
    """The peak sample at t covers (t - reach, t], its maximum dated by its stamp; where the
    exporter also gave the largest value after that one (the next peak), the window splits
    at the peak's stamp, and the part after it is bounded by the next peak. ``dates``:
    ``peak_dates(metrics)``, if the caller has them."""
    times, values = metrics[PEAK_METRIC]
    if dates is None:
        dates = peak_dates(metrics)
    following = metrics.get(NEXT_PEAK_METRIC)
    nexts = aligned(following, times)
    next_dates = aligned(metrics.get(NEXT_PEAK_TIME_METRIC), times)
    out: list[tuple[Stretch, ...]] = []
    lows, highs, tops = [], [], []
    for t, v, d, r, after, when in zip(times, values, dates, reach, nexts, next_dates,
                                       strict=True):
        if d is not None and after is not None and when and math.isfinite(when):
            # (t - r, d] and (d, t]: a stamp outside the window (another host's clock) splits
            # it at its edge, so that no stretch reaches beyond the window it was read of
            cut = min(max(d, t - r), t)
            out.append(((t - r, cut, v, d), (cut, t, after, round(when * 1000))))
            lows.append(t - r)
            highs.append(t)
            tops.append(max(v, after))
        else:
            out.append(((t - r, t, v, d),))
            lows.append(t - r)
            highs.append(t)
            tops.append(v)
    numbers = not any(map(math.isnan, values)) and not any(
        map(math.isnan, following[1] if following else ()))
    return Cover(times, reach, out, max(reach, default=0), lows, highs, tops, numbers)


def upper_bound(known: Cover, lo: int, hi: int, found: float,
                data: tuple[int, int] | None = None,
                moments: tuple[int, int] | None = None) -> float:
    """How high the memory of one GPU may have been in [lo, hi] (ms), given that it was
    ``found`` at most: ``found`` when every moment lies in a stretch whose maximum is dated
    inside the range, else the largest stretch maximum that may hide a moment,
    ``math.inf`` where a moment lies in no stretch, or only in stretches whose maximum is
    NaN (a failed reading says nothing; see ``cover``). The range is first
    narrowed to the GPU's data (``data``: from its first window's start to its last
    scrape, those of ``known`` where not given): before and after, nothing claims to know
    it. ``moments``: only the moments of the range within (a, b) are asked, whose
    stretches ``known`` holds (a piece of a longer range: the answer over the whole range
    is the largest of its pieces')."""
    times, reach = known.times, known.reach
    if not times and data is None:
        return math.inf
    first, last = data if data is not None else (times[0] - reach[0], times[-1])
    lo, hi = max(lo, first), min(hi, last)
    a, b = (lo, hi) if moments is None else (max(lo, moments[0]), min(hi, moments[1]))
    if a >= b:
        return found
    # the scrapes whose windows can reach into the range: a job's span costs its own scrapes
    first, last = bisect_left(times, a), bisect_right(times, b + known.longest)
    if known.numbers and max(known.tops[first:last], default=-math.inf) <= found:
        # no stretch above it (nor one outside the range): only a hole says more
        covered = _covered(zip(known.lows[first:last], known.highs[first:last], strict=True),
                           a, b)
        return found if covered else math.inf
    # conditional expressions, not max() and min(): a fleet's report cuts millions
    spans = [(x if x > a else a, y if y < b else b, v, d is not None and lo <= d <= hi)
             for stretches in known.stretches[first:last] for x, y, v, d in stretches]
    return _swept([x for x in spans if x[0] < x[1]], a, b, found)


Span = tuple[int, int, float, bool]
"""(start, end, maximum, clean) in ms: a stretch cut to a range; clean where its maximum was
sampled inside the range."""


def _swept(spans: list[Span], lo: int, hi: int, found: float) -> float:
    """``upper_bound`` of non-empty ``spans`` within [lo, hi]: a sweep over their edges. A
    moment is covered by a few windows at a time (a peak window and a sampling interval
    over the scrapes' interval), so the covering ones are kept in a plain list."""
    cuts = sorted({lo, hi, *(a for a, *_ in spans), *(b for _, b, *_ in spans)})
    spans = sorted(spans)
    opened, count = 0, len(spans)
    active: list[Span] = []
    bound = found
    for p in cuts[:-1]:  # (p, next cut] is covered by the spans with start <= p < end
        while opened < count and spans[opened][0] <= p:
            active.append(spans[opened])
            opened += 1
        active = [span for span in active if span[1] > p]
        if not active:
            return math.inf  # a moment no window covers
        lowest = math.inf  # stays so where every maximum over the moment is NaN
        for _, _, value, clean in active:
            if clean:  # a stretch whose maximum lies in the range covers it: at most found
                break
            if value < lowest:
                lowest = value
        else:
            if lowest > bound:
                bound = lowest
    return bound


def _covered(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether the spans [start, end) cover [lo, hi): no moment that no window covers (an
    empty span covers nothing)."""
    reached = lo
    for a, b in sorted(spans):
        if a >= b:
            continue
        if a > reached:
            return False
        reached = max(reached, b)
        if reached >= hi:
            return True
    return reached >= hi
