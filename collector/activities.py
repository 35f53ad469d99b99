"""activities.csv: how much of each of Dask's fine performance metrics a job, DAG, task
prefix and activity accrued over an export's range, from the counters the scheduler preload
exports (``dask_job_activity_<unit>_total``). Pure: the rules are tested without a server.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress
from operator import gt
from typing import Any

from dask_metrics.collector.lifetimes import job_key, job_order, life, plain
from dask_metrics.collector.series import Series, id_key
from dask_metrics.contract import (
    ACTIVITY,
    ACTIVITY_COLUMNS,
    ACTIVITY_FAMILY,
    DAG_ID,
    PREFIX,
)

ActivityKey = tuple[str, str, str, str, str]  # job, dag, prefix, activity, unit


def unit_of(metric: str) -> str:
    """``dask_job_activity_seconds_total`` -> ``seconds``."""
    return metric.removeprefix(ACTIVITY_FAMILY).removesuffix("_total")


def increase(times: Sequence[int], values: Sequence[float], start: int) -> float:
    """A counter's increase after ``start`` (ms), reset-safe and not extrapolated.

    The baseline is the last sample at or before ``start`` (the series existed then); with
    none, 0 (the series began inside the range, and a counter begins at 0). A drop is a
    reset (a restarted scheduler): the counter counted from 0 again, so its new value is
    all increase. NaN and infinite samples are skipped (preloads before 2026-11-24 exported
    an infinite digest as +Inf). Computed at C speed: the last value minus the baseline,
    plus the value before each drop.
    """
    if not all(map(math.isfinite, values)):
        kept = [(t, v) for t, v in zip(times, values, strict=True) if math.isfinite(v)]
        times, values = [t for t, _ in kept], [v for _, v in kept]
    i = bisect_right(times, start)
    points = list(values[i - 1:]) if i else [0.0, *values]
    before, after = points[:-1], points[1:]
    return points[-1] - points[0] + sum(compress(before, map(gt, before, after)))


def increases(series: Iterable[Series], start: int) -> dict[ActivityKey, float]:
    """The increase of every (job, dag, prefix, activity, unit) after ``start``: the pieces
    of one key (other instance labels: a moved scheduler) add up."""
    out: dict[ActivityKey, float] = {}
    for s in series:
        labels = s.labels
        key = (job_key(labels), labels.get(DAG_ID, ""), labels.get(PREFIX, ""),
               labels.get(ACTIVITY, ""), unit_of(labels.get("__name__", "")))
        out[key] = out.get(key, 0.0) + increase(s.times, s.values, start)
    return out


def activity_rows(totals: Mapping[ActivityKey, float], names: Mapping[str, str]
                  ) -> list[dict[str, Any]]:
    """activities.csv's rows (dicts keyed by ACTIVITY_COLUMNS), in job, DAG, prefix,
    activity and unit order; keys that did not increase in the range are left out (the
    counters of jobs that ran before it)."""
    keys = sorted((k for k, v in totals.items() if v != 0),
                  key=lambda k: (job_order(k[0]), id_key(k[1]), *k[2:]))
    return [dict(zip(ACTIVITY_COLUMNS, (plain(job), names.get(job, ""), dag, prefix, activity,
                                        unit, totals[job, dag, prefix, activity, unit],
                                        life(job)), strict=True))
            for job, dag, prefix, activity, unit in keys]
