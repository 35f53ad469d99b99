"""The parts of a GPU's two scrape intervals that straddle a range's edges, which no interval
of the export's table covers: each takes its share of the counters' increases in
proportion to time (usage's rule for a cut interval). Pure."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping

from dask_metrics.collector.attribution.usage import (
    BUSY,
    ENERGY,
    SM,
    TENSOR,
    Usage,
    share,
)
from dask_metrics.collector.model.counters import rise, went_back
from dask_metrics.collector.model.series import Samples

#: The counters whose increases the intervals across a range's edges share.
EDGE_COUNTERS = (BUSY, ENERGY, SM, TENSOR)


def edge_usage(counters: Mapping[str, Samples], since: int, until: int, max_age: int
               ) -> list[tuple[int, Usage]]:
    """The parts inside [since, until] (ms) of one GPU's two scrape intervals that straddle
    its edges, which no interval of the table covers: (the time whose worker state the part
    is attributed to, its Usage). ``counters``: the GPU's busy-seconds, energy, SM and
    tensor counters by column name, with samples on both sides of the edges.

    A part takes its share of the interval's counter increases in proportion to time (exact
    where the GPU's use was even over the interval; off by at most the share of one scrape
    interval's increase otherwise): a session's first and last intervals are neither dropped
    (a long scrape interval would lose most of a short job's energy) nor counted whole."""
    clock = counters.get(BUSY) or counters.get(ENERGY)
    if clock is None:
        return []
    times = clock[0]
    first = bisect_left(times, since)  # the first sample at or after since
    last = bisect_right(times, until) - 1  # the last at or before until
    out = []
    if 0 < first <= last and times[first] > since:  # (t0, t1] straddles since
        out.append((times[first], _part(counters, times[first - 1], times[first], since,
                                        times[first], max_age)))
    if first <= last < len(times) - 1 and times[last] < until:  # (t0, t1] straddles until
        out.append((until, _part(counters, times[last], times[last + 1], times[last], until,
                                 max_age)))
    if 0 < first == last + 1 < len(times):  # one interval holds the whole range
        out.append((until, _part(counters, times[last], times[first], since, until, max_age)))
    return [(t, u) for t, u in out if u.seconds]


def _part(counters: Mapping[str, Samples], t0: int, t1: int, a: int, b: int, max_age: int
          ) -> Usage:
    """The share [a, b] of the interval (t0, t1] (a gap when longer than ``max_age``)."""
    if t1 - t0 > max_age or b <= a:
        return Usage()

    ends = {}
    for name in EDGE_COUNTERS:
        if (found := counters.get(name)) is not None:
            at = dict(zip(*found, strict=True))
            ends[name] = (at.get(t0), at.get(t1))
    part = share({name: rise(*pair) for name, pair in ends.items()}, None, t0, t1, a, b)
    part.resets = int(any(went_back(*ends[n]) for n in (BUSY, ENERGY) if n in ends))
    return part
