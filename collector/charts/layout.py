"""How a chart lays out what it shows, decided once for both drawings of it (``collector
plot``'s matplotlib figures and the report's SVG charts): the points of a line, the time
axis's unit, the rows and forms of the phase labels, and the jobs' colours. No drawing here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.output.traces import Phase

GAP_FACTOR = 3.0
"""Samples that stop for more than this many times their usual interval: a gap."""


def break_gaps(times: Sequence[float], values: Sequence[float],
               factor: float = GAP_FACTOR) -> tuple[list[float], list[float]]:
    """Insert a NaN point where samples stop for more than ``factor`` times their usual
    interval (a worker restarting, scrapes failing), so that no line is drawn across a gap."""
    import numpy as np

    t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    steps = np.diff(t)
    usual = np.sort(steps[steps > 0])
    if not len(usual):
        return t.tolist(), v.tolist()
    cut = np.flatnonzero(steps > factor * usual[len(usual) // 2]) + 1
    return (np.insert(t, cut, (t[cut - 1] + t[cut]) / 2).tolist(),
            np.insert(v, cut, np.nan).tolist())


def envelope(times: Sequence[float], values: Sequence[float], lo: float, hi: float,
             buckets: int) -> tuple[Any, Any]:
    """At most two points per bucket of [lo, hi] cut in ``buckets`` equal widths: the
    lowest and the highest sample of each bucket, at their own times and in time order.
    With a bucket no wider than a pixel column, the line looks the same and every spike
    stays (a mean or a stride would lose them), at a fraction of the points to draw.

    ``times`` ascending; a NaN value breaks the line: no bucket spans it, and a NaN point
    stays between the samples before and after it. Returns float arrays (times, values).
    """
    import numpy as np

    t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    hole = np.isnan(v)
    run = np.cumsum(hole)[~hole]  # stretches between holes, numbered
    t, v = t[~hole], v[~hole]
    if not len(t):
        return t, v
    key = run * buckets + bucket_of(t, lo, bucket_width(lo, hi, buckets), buckets)
    order = np.lexsort((v, key))  # by bucket, then value: each bucket's min first, max last
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    last = np.r_[first[1:], len(order)] - 1
    keep = np.unique(np.r_[order[first], order[last]])  # back in time order
    t, v, run = t[keep], v[keep], run[keep]
    cut = np.flatnonzero(run[1:] != run[:-1]) + 1
    return (np.insert(t, cut, (t[cut - 1] + t[cut]) / 2), np.insert(v, cut, np.nan))


def bucket_width(lo: float, hi: float, buckets: int) -> float:
    """The width of each of ``buckets`` equal parts of [lo, hi] (1 for an empty range)."""
    return (hi - lo) / buckets if hi > lo else 1.0


def bucket_of(times: Any, lo: float, width: float, buckets: int) -> Any:
    """The part of a range cut from ``lo`` in ``buckets`` parts of ``width`` each of the
    times (a float array) falls in, those outside it in the first or the last."""
    import numpy as np

    return np.clip(((times - lo) // width).astype(np.int64), 0, buckets - 1)


TIME_UNITS = ((15 * 60, 1.0, "seconds"), (10 * 3600, 60.0, "minutes"),
              (math.inf, 3600.0, "hours"))


def time_unit(span: float) -> tuple[float, str]:
    """(seconds per unit, unit) for a time axis ``span`` seconds long: seconds up to 15
    minutes, minutes up to 10 hours, hours beyond, so that ticks read as round numbers."""
    return next((size, unit) for limit, size, unit in TIME_UNITS if span <= limit)


def place_labels(labels: Sequence[tuple[float, Sequence[float]]], levels: int = 3
                 ) -> list[tuple[int, int]]:
    """(row, form) for each label, given in order of position as (centre, widths of its
    forms, longest first), row 0 nearest the axes: the first form that fits on a free row
    (one where it overlaps no label placed before) on the lowest such row; when no form
    fits anywhere, the shortest on the row that frees first. Labels are never dropped."""
    ends = [-math.inf] * levels
    out = []
    for centre, widths in labels:
        fits = ((form, row) for form, width in enumerate(widths) for row in range(levels)
                if ends[row] <= centre - width / 2)
        form, row = next(fits, (len(widths) - 1, min(range(levels), key=ends.__getitem__)))
        ends[row] = max(ends[row], centre + widths[form] / 2)
        out.append((row, form))
    return out


def job_colours(found: Iterable[Phase]) -> dict[str, str]:
    """One colour per job (matplotlib's cycle, ``C0``-``C9``), in the order the jobs first
    ran."""
    ordered = sorted(found, key=lambda p: p.start)
    return {job: f"C{i % 10}" for i, job in enumerate(dict.fromkeys(p.job for p in ordered))}


def label_forms(names: JobNames, p: Phase) -> tuple[str, ...]:
    """A phase's label, then shorter forms for a narrow phase (its job shows by colour):
    ``etl · DAG 2``, ``DAG 2``, ``2``; a job's only DAG keeps the job's name."""
    full = names.phase(p.job, p.dag)
    return (full, f"DAG {p.dag}", p.dag) if p.dag and full != names.job(p.job) else (full,)
