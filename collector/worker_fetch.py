"""One worker's part of an export, read from Prometheus: its GPUs' series, what it ran when,
its resources and the prefixes it executed, in as few queries as the data needs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from dask_metrics.collector.background import Background
from dask_metrics.collector.columns import (
    Column,
    source_metrics,
    worker_metrics,
)
from dask_metrics.collector.fetch import (
    ATTRIBUTION_METRICS,
    Scope,
    fetch_gpu_series,
    fetch_worker_series,
    lookahead,
)
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.series import Samples, Series, Timeline, WorkerInfo, by_metric
from dask_metrics.collector.tables import WorkerTable, joined_by_metric
from dask_metrics.collector.worker_runs import RAN_METRICS, ran_timeline, within
from dask_metrics.contract import (
    WORKER_PREFIX_TASKS,
)

Visit = Callable[[WorkerInfo, Mapping[str, list[Series]], Timeline, WorkerTable], None]
"""Called with each worker's fetched series, activity and table as it is written: what the
session report computes from the very data of the export."""


class WorkerData(NamedTuple):
    """What one worker's part of an export reads from Prometheus."""

    gpu: dict[str, list[Series]]  # the columns' series (raw, or on the --step grid)
    ran: Timeline  # what it ran when (worker_runs)
    resources: dict[str, Samples]  # the worker columns' series
    prefixes: list[Series]  # dask_job_worker_prefix_tasks
    attribution: dict[str, list[Series]]  # raw busy, energy and memory used, and the
    # samples just outside the range (at most ``age`` before and after)


def fetch_workers(client: PrometheusClient, workers: Sequence[str], columns: Sequence[Column],
                  timeline: Timeline, lo: int, hi: int, chunk: int, step: int | None,
                  age: int, scope: Scope, executed: Collection[str], extra: Sequence[str] = ()
                  ) -> dict[str, WorkerData]:
    """The series of a batch of workers (``worker_batches``): their GPUs' columns and their
    scheduler series (tasks, the worker columns', prefix tasks), one query each for the
    whole batch; a batch of one asks exactly what a single worker needs.

    ``executed``: the workers the scheduler saw executing tasks in the range
    (``executing_workers``); only theirs are the prefix tasks and gpu_by_prefix's raw
    counters read (with the samples just outside the range), the counters not among the
    columns' in a third query sent at the same time as the columns' (in a thread: the
    server answers both at once), raw also with ``step``. A worker without them adds
    nothing to gpu_by_prefix.csv, and data from an older scheduler preload costs no more
    series. ``extra``: more series of the workers, raw, fetched with the columns' (without
    ``step``)."""
    ran = [w for w in workers if w in executed]
    metrics = source_metrics(columns) + [m for m in extra if step is None]
    apart_metrics = [m for m in ATTRIBUTION_METRICS if m not in metrics or step] if ran else []
    reused = [m for m in ATTRIBUTION_METRICS if m not in apart_metrics] if ran else []
    after = lookahead(hi, age)

    def raw(names: Sequence[str], a: int, b: int) -> dict[str, dict[str, list[Series]]]:
        return fetch_gpu_series(client, ran, names, a, b, chunk, None, age, scope)

    apart = Background(lambda names: raw(names, lo - age, after),
                       apart_metrics) if apart_metrics else None
    gpu = fetch_gpu_series(client, workers, metrics, lo, hi, chunk, step, age, scope)
    # the samples just outside [lo, hi]: the intervals that straddle the range's edges
    head = raw(reused, lo - age, lo - 1) if reused else {}
    tail = raw(reused, hi + 1, after) if reused and after > hi else {}
    found_apart = apart.result() if apart is not None else {}
    resources = worker_metrics(columns)
    sched = {w: [*resources, *RAN_METRICS, *([WORKER_PREFIX_TASKS.name] if w in executed else [])]
             for w in workers}
    asked = sorted({m for names in sched.values() for m in names})
    found = fetch_worker_series(client, workers, asked, lo - age, lookahead(hi, age), chunk,
                                scope)
    out = {}
    for w in workers:
        mine = within(by_metric(s for s in found[w] if s.labels.get("__name__") in sched[w]),
                      lo - age, hi)
        attribution = {m: found_apart.get(w, {}).get(m, []) if m in apart_metrics
                       else [*head.get(w, {}).get(m, []), *gpu[w].get(m, []),
                             *tail.get(w, {}).get(m, [])]
                       for m in ATTRIBUTION_METRICS} if w in executed else {}
        out[w] = WorkerData(gpu[w], ran_timeline(mine, timeline.times, hi, age),
                            joined_by_metric({m: mine[m] for m in resources if m in mine}),
                            mine.get(WORKER_PREFIX_TASKS.name, []), attribution)
    return out
