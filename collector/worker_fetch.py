"""One worker's part of an export, read from Prometheus: its GPUs' series, what it ran when,
its resources and the prefixes it executed, in as few queries as the data needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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


def fetch_worker(client: PrometheusClient, worker: str, columns: Sequence[Column],
                 timeline: Timeline, lo: int, hi: int, chunk: int, step: int | None,
                 age: int, scope: Scope, executed: bool, extra: Sequence[str] = ()
                 ) -> WorkerData:
    """One worker's series: its GPUs' columns and its scheduler series (tasks, the worker
    columns', prefix tasks), one query each.

    ``executed``: the scheduler saw the worker executing tasks in the range
    (``executing_workers``); only then are its prefix tasks and gpu_by_prefix's raw counters
    read (with the samples just outside the range), the counters not among the columns' in
    a third query sent at the same time as the columns' (in a thread: the server answers
    both at once), raw also with ``step``. A worker without them adds nothing to
    gpu_by_prefix.csv, and data from an older scheduler preload costs no more series.
    ``extra``: more series of the worker, raw, fetched with the columns' (without ``step``)."""
    metrics = source_metrics(columns) + [m for m in extra if step is None]
    apart_metrics = ([m for m in ATTRIBUTION_METRICS if m not in metrics or step]
                     if executed else [])
    reused = [m for m in ATTRIBUTION_METRICS if m not in apart_metrics] if executed else []
    after = lookahead(hi, age)

    def raw(names: Sequence[str], a: int, b: int) -> dict[str, list[Series]]:
        return fetch_gpu_series(client, worker, names, a, b, chunk, None, age, scope)

    apart = Background(lambda names: raw(names, lo - age, after),
                       apart_metrics) if apart_metrics else None
    gpu = fetch_gpu_series(client, worker, metrics, lo, hi, chunk, step, age, scope)
    # the samples just outside [lo, hi]: the intervals that straddle the range's edges
    head = raw(reused, lo - age, lo - 1) if reused else {}
    tail = raw(reused, hi + 1, after) if reused and after > hi else {}
    found_apart = apart.result() if apart is not None else {}
    attribution = {m: found_apart.get(m, []) if m in apart_metrics
                   else [*head.get(m, []), *gpu.get(m, []), *tail.get(m, [])]
                   for m in ATTRIBUTION_METRICS} if executed else {}
    resources = worker_metrics(columns)
    sched = [*resources, *RAN_METRICS, *([WORKER_PREFIX_TASKS.name] if executed else [])]
    found = within(by_metric(fetch_worker_series(client, worker, sched, lo - age,
                                                 lookahead(hi, age), chunk, scope)), lo - age, hi)
    return WorkerData(gpu, ran_timeline(found, timeline.times, hi, age),
                      joined_by_metric({m: found[m] for m in resources if m in found}),
                      found.get(WORKER_PREFIX_TASKS.name, []), attribution)
