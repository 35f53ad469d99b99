"""activities.csv: how much of each of Dask's fine performance metrics a job, DAG, task
prefix and activity accrued over an export's range, from the counters the scheduler preload
exports (``dask_job_activity_<unit>_total``). Pure: the rules are tested without a server.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any

from dask_metrics.collector.model.counters import before_drops, finite
from dask_metrics.collector.model.lifetimes import job_key, job_order, life, plain
from dask_metrics.collector.model.series import Series, id_key
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


class Increases:
    """The increase of every (job, dag, prefix, activity, unit) after ``start``, its
    counters told a piece of the range at a time, in time order (each piece's series: their
    samples after the pieces before): what a job's counters over a long range are read in,
    a few chunks at a time. Each counter carries its baseline, last value and drops, so
    the increases are ``increase``'s over the whole range, to the bit; the pieces of one key
    (other instance labels: a moved scheduler) add up."""

    def __init__(self, start: int) -> None:
        self.start = start
        # a series' identity: [its key, baseline, last time, last value, drops so far]
        self._counters: dict[tuple[tuple[str, str], ...], list[Any]] = {}

    def add(self, series: Iterable[Series]) -> None:
        for s in series:
            times, values = finite(s.times, s.values)
            if not times:
                continue
            ident = tuple(sorted(s.labels.items()))
            found = self._counters.get(ident)
            if found is None:
                i = bisect_right(times, self.start)
                points = list(values[i - 1:]) if i else [0.0, *values]
                labels = s.labels
                key = (job_key(labels), labels.get(DAG_ID, ""), labels.get(PREFIX, ""),
                       labels.get(ACTIVITY, ""), unit_of(labels.get("__name__", "")))
                found = self._counters[ident] = [key, points[0], times[-1], points[-1], 0]
            else:
                i = bisect_right(times, found[2])
                j = bisect_right(times, self.start, i)
                if j > i:  # still at or before the start: the baseline moves on
                    found[1] = values[j - 1]
                    points = list(values[j - 1:])
                else:
                    points = [found[3], *values[i:]]
                found[2], found[3] = max(found[2], times[-1]), points[-1]
            for dropped in before_drops(points):  # in order, as ``increase`` adds them
                found[4] += dropped

    def result(self) -> dict[ActivityKey, float]:
        out: dict[ActivityKey, float] = {}
        for key, baseline, _, last, drops in self._counters.values():
            out[key] = out.get(key, 0.0) + (last - baseline + drops)
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
