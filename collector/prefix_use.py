"""What a task prefix got of a GPU, and what both of gpu_by_prefix's rules read the same
way: the prefix-task series by (job, DAG, prefix), and a counter's increases. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count, islice
from math import isnan
from operator import sub

from dask_metrics.collector.lifetimes import job_key
from dask_metrics.collector.series import Samples, Series, join
from dask_metrics.contract import DAG_ID, PREFIX

PrefixKey = tuple[str, str, str]  # job, dag, prefix
State = tuple[tuple[PrefixKey, float], ...]  # (key, tasks) of what executed, in key order
NO_TASKS: State = ()  # no task executed on the worker


@dataclass(slots=True)
class PrefixUse:
    """What one (job, dag, prefix) got: busy seconds, peak memory (bytes), energy (J)."""

    gpu_seconds: float = 0.0
    peak_mem: float | None = None
    energy: float | None = None



def by_key(series: Iterable[Series]) -> list[tuple[PrefixKey, Samples]]:
    """dask_job_worker_prefix_tasks by (job, dag, prefix), in key order (so that a state's
    items come in that order), the pieces of one key (a restarted scheduler's other
    instance label) joined, so that a key has one count per scrape."""
    pieces: dict[PrefixKey, list[Series]] = {}
    for s in series:
        key = (job_key(s.labels), s.labels.get(DAG_ID, ""), s.labels.get(PREFIX, ""))
        pieces.setdefault(key, []).append(s)
    return [(key, join(pieces[key])) for key in sorted(pieces)]


def increments(samples: Samples, max_gap: int) -> tuple[list[int], list[float]]:
    """(positions, increases) of a counter from each sample to the next, at the later
    sample's position: reset-safe, none across a gap longer than ``max_gap`` or next to a
    NaN (v == v is False for NaN only)."""
    times, values = samples
    later, after = islice(times, 1, None), islice(values, 1, None)
    steps = list(map(sub, after, values))  # the usual case: every step kept, at C speed
    if (not any(map(isnan, steps)) and min(steps, default=0.0) >= 0
            and max(map(sub, later, times), default=0) <= max_gap):
        return list(range(1, len(times))), steps
    kept = [(i, v1 - v0 if v1 >= v0 else v1)
            for i, t0, t1, v0, v1 in zip(count(1), times, islice(times, 1, None), values,
                                         islice(values, 1, None))  # the shortest: n - 1
            if t1 - t0 <= max_gap and v0 == v0 and v1 == v1]
    return [i for i, _ in kept], [d for _, d in kept]
