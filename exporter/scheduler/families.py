"""The ``dask_job_*`` families of one scrape, built from the contract's specs, and the
collectors that put them on a prometheus_client registry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric

from dask_metrics.contract import (
    ACTIVITY_FAMILY,
    CLUSTER_ACTIVITY_FAMILY,
    CURRENT_DAG,
    CURRENT_JOB,
    DAG_FINISHED,
    DAG_INFO,
    DAG_STARTED,
    DAG_STATUS,
    DAG_SUBMITTED,
    DAGS_COMPLETED,
    DAGS_UNSCRAPED,
    MONITOR_START,
    MONITOR_STOP,
    PLUGIN_ERRORS,
    SCHEDULER_SPECS,
    SCHEDULER_START,
    SCHEDULER_STARTED,
    WORKER_CPU,
    WORKER_DAG_END,
    WORKER_DAG_START,
    WORKER_EXECUTING,
    WORKER_GPU_INFO,
    WORKER_MANAGED_MEMORY,
    WORKER_MEMORY,
    WORKER_MEMORY_LIMIT,
    WORKER_OCCUPANCY,
    WORKER_PREFIX_TASKS,
    WORKER_PROCESSING,
    WORKER_RMM_POOL,
    WORKER_RMM_USED,
    WORKER_SPILLED,
    WORKER_STORED,
    WORKER_TASKS,
    WORKER_THREADS,
    activity_spec,
    cluster_activity_spec,
)
from dask_metrics.exporter.scheduler.fine import FineSnapshot
from dask_metrics.exporter.tracker_snapshot import TrackerSnapshot
from dask_metrics.metricspec import MetricSpec

logger = logging.getLogger(__name__)


def families(snap: TrackerSnapshot, errors: dict[str, int], cluster: str,
             fine: FineSnapshot | None = None, started: float = 0.0) -> list[Metric]:
    """The metric families of one scrape; every series is labelled dask_cluster=cluster,
    and those of jobs, DAGs and sessions scheduler_start=``started`` (this scheduler's
    life: its ids count from 0)."""
    fam = {spec.name: spec.family() for spec in SCHEDULER_SPECS}
    life = lifetime_label(started)

    def add(spec: MetricSpec, labels: list[str], value: float) -> None:
        if spec.name not in fam:  # an activity unit beyond seconds and bytes
            fam[spec.name] = spec.family()
        first = [cluster, life] if spec.labels[1:2] == (SCHEDULER_START,) else [cluster]
        fam[spec.name].add_metric([*first, *labels], value)  # the one place it is added

    add(SCHEDULER_STARTED, [], started)
    add(CURRENT_JOB, [], snap.current_job)
    add(CURRENT_DAG, [], snap.current_dag)
    for worker, job_id, dag_id, tasks in snap.worker_tasks:
        add(WORKER_TASKS, [worker, str(job_id), str(dag_id)], tasks)
    for worker, job_id, dag_id, begin, end in snap.worker_spans:
        ids = [worker, str(job_id), str(dag_id)]
        add(WORKER_DAG_START, ids, begin)
        if end is not None:
            add(WORKER_DAG_END, ids, end)
    for job_id, dag_id, job_name, client, status in snap.dags:
        add(DAG_INFO, [str(job_id), str(dag_id), job_name, client], 1)
        add(DAG_STATUS, [str(job_id), str(dag_id)], status)
    for job_id, dag_id, submitted, started, finished in snap.dag_times:
        ids = [str(job_id), str(dag_id)]
        add(DAG_SUBMITTED, ids, submitted)
        if started is not None:
            add(DAG_STARTED, ids, started)
        if finished is not None:
            add(DAG_FINISHED, ids, finished)
    for status, count in snap.completed.items():
        add(DAGS_COMPLETED, [status], count)
    add(DAGS_UNSCRAPED, [], snap.unscraped)
    if snap.session is not None:
        add(MONITOR_START, [], snap.session[0])
        add(MONITOR_STOP, [], snap.session[1])
    for worker, address, gpu, uuid in snap.gpus:
        add(WORKER_GPU_INFO, [worker, address, str(gpu), uuid], 1)
    for hook, count in errors.items():
        add(PLUGIN_ERRORS, [hook], count)
    if fine is not None:
        _add_fine(add, fine)
    return list(fam.values())


def _add_fine(add: Callable[[MetricSpec, list[str], float], None], fine: FineSnapshot) -> None:
    """The series of where the time went: activities per job and cluster-wide, worker
    resources, prefix tasks."""
    specs: dict[str, MetricSpec] = {}

    def spec_of(family: str, unit: str) -> MetricSpec:
        spec = specs.get(family + unit)
        if spec is None:
            make = activity_spec if family == ACTIVITY_FAMILY else cluster_activity_spec
            spec = specs[family + unit] = make(unit)
        return spec

    for a in fine.activities:
        add(spec_of(ACTIVITY_FAMILY, a.unit), [a.job_id, a.dag_id, a.prefix, a.activity],
            a.value)
    for unit, context, activity, value in fine.cluster:
        add(spec_of(CLUSTER_ACTIVITY_FAMILY, unit), [context, activity], value)
    for worker, r in fine.workers:
        for spec, value in (
            (WORKER_MEMORY, r.memory), (WORKER_MANAGED_MEMORY, r.managed),
            (WORKER_SPILLED, r.spilled), (WORKER_MEMORY_LIMIT, r.memory_limit),
            (WORKER_CPU, r.cpu), (WORKER_THREADS, r.threads),
            (WORKER_EXECUTING, r.executing), (WORKER_PROCESSING, r.processing),
            (WORKER_OCCUPANCY, r.occupancy), (WORKER_STORED, r.stored),
        ):
            add(spec, [worker], value)
        for spec, maybe in ((WORKER_RMM_USED, r.rmm_used), (WORKER_RMM_POOL, r.rmm_pool)):
            if maybe is not None:
                add(spec, [worker], maybe)
    for worker, job_id, dag_id, prefix, tasks in fine.prefix_tasks:
        add(WORKER_PREFIX_TASKS, [worker, job_id, dag_id, prefix], tasks)


def lifetime_label(started: float) -> str:
    """The scheduler_start label's value: unix seconds with milliseconds."""
    return f"{started:.3f}"


def errors_family(errors: dict[str, int], cluster: str) -> Metric:
    """The hook error counter alone: what a scrape exports when building families fails."""
    fam = PLUGIN_ERRORS.family()
    for hook, count in errors.items():
        fam.add_metric([cluster, hook], count)
    return fam


def _described() -> list[Metric]:
    """Empty families naming every series, for a registry's duplicate check."""
    return [spec.family() for spec in SCHEDULER_SPECS]


class Source(Protocol):
    """What the collectors export: a plugin's families of this scrape."""

    def collect(self) -> list[Metric]: ...


class DefaultRegistryHub:
    """The one collector of the preload on prometheus_client's default REGISTRY.

    Schedulers in one process (tests, notebooks) share REGISTRY, which would export their
    series twice: like Dask's own collectors, the newest live source is the one exported.
    Registered with the first source, unregistered with the last.
    """

    def __init__(self) -> None:
        self._sources: list[Source] = []
        self._lock = threading.Lock()
        self._registered = False

    def add(self, source: Source) -> None:
        with self._lock:
            self._sources.append(source)
            if not self._registered:
                try:
                    REGISTRY.register(self)
                    self._registered = True
                except ValueError:
                    logger.warning(
                        "dask-metrics: dask_job_* series already registered", exc_info=True
                    )

    def remove(self, source: Source) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)
            if not self._sources and self._registered:
                REGISTRY.unregister(self)
                self._registered = False

    def describe(self) -> list[Metric]:
        return _described()

    def collect(self) -> list[Metric]:
        sources = list(self._sources)
        return sources[-1].collect() if sources else []


HUB = DefaultRegistryHub()


class SourceCollector:
    """A registry entry for one source, for a registry of its own (``--metrics-port``)."""

    def __init__(self, source: Source) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        return _described()

    def collect(self) -> list[Metric]:
        return self._source.collect()
