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
    attribution: dict[str, list[Series]]  # raw busy, energy and memory used


def fetch_worker(client: PrometheusClient, worker: str, columns: Sequence[Column],
                 timeline: Timeline, lo: int, hi: int, chunk: int, step: int | None,
                 age: int, scope: Scope, executed: bool, extra: Sequence[str] = ()
                 ) -> WorkerData:
    """One worker's series: its GPUs' columns and its scheduler series (tasks, the worker
    columns', prefix tasks), one query each.

    ``executed``: the worker has dask_job_worker_prefix_tasks series in the range
    (``prefix_workers``); only then are they and gpu_by_prefix's raw counters read, the
    counters not among the columns' in a third query sent at the same time as the columns'
    (in a thread: the server answers both at once), raw also with ``step``. A worker without
    them adds nothing to gpu_by_prefix.csv, and data from an older scheduler preload costs
    no more series. ``extra``: more series of the worker, raw, fetched with the columns'
    (without ``step``)."""
    metrics = source_metrics(columns) + [m for m in extra if step is None]
    apart_metrics = ([m for m in ATTRIBUTION_METRICS if m not in metrics or step]
                     if executed else [])
    raw = Background(lambda names: fetch_gpu_series(client, worker, names, lo, hi, chunk, None,
                                                      age, scope),
                      apart_metrics) if apart_metrics else None
    gpu = fetch_gpu_series(client, worker, metrics, lo, hi, chunk, step, age, scope)
    apart = raw.result() if raw is not None else {}
    attribution = {m: source[m] for m in ATTRIBUTION_METRICS
                   if m in (source := apart if m in apart_metrics else gpu)} if executed else {}
    resources = worker_metrics(columns)
    sched = [*resources, *RAN_METRICS, *([WORKER_PREFIX_TASKS.name] if executed else [])]
    found = within(by_metric(fetch_worker_series(client, worker, sched, lo - age,
                                                 lookahead(hi, age), chunk, scope)), lo - age, hi)
    return WorkerData(gpu, ran_timeline(found, timeline.times, hi, age),
                      joined_by_metric({m: found[m] for m in resources if m in found}),
                      found.get(WORKER_PREFIX_TASKS.name, []), attribution)
