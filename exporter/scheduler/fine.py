"""What one scrape exports of where the time went (the activity ledger and the
scheduler's cluster-wide metrics), each worker's resources, and which task prefixes each
worker executes now. Read at scrape time from what the scheduler already holds: no round
trip to the workers, nothing per task transition."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from dask_metrics.contract import safe_unit
from dask_metrics.exporter.activity_ledger import Activity, ActivityLedger, activity_label
from dask_metrics.exporter.identity import worker_label
from dask_metrics.exporter.job_model import Dag
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.label_values import clean_label
from dask_metrics.exporter.scheduler import dask_internals
from dask_metrics.exporter.scheduler.dask_internals import WorkerResources

PrefixTasks = tuple[str, str, str, str, int]  # worker label, job id, dag id, prefix, tasks


@dataclass(frozen=True)
class FineSnapshot:
    activities: list[Activity]
    cluster: list[tuple[str, str, str, float]]  # unit, context, activity, value
    workers: list[tuple[str, WorkerResources]]  # worker label, resources
    prefix_tasks: list[PrefixTasks]


def count_prefix_tasks(
    executing: Iterable[tuple[str, Iterable[tuple[Hashable, str]]]],
    owner: Callable[[Hashable], Dag | None],
    prefix_label: Callable[[Any, str], str],
) -> list[PrefixTasks]:
    """Tasks per (worker, job, DAG, prefix label) from (worker label, [(key, prefix)]).

    A task no DAG owns (submitted before the preload) counts under job_id="" dag_id="",
    like its time in the activity counters."""
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for worker, tasks in executing:
        for key, prefix in tasks:
            dag = owner(key)
            if dag is None:
                counts[worker, "", "", prefix_label(None, prefix)] += 1
            else:
                counts[worker, str(dag.job.id), str(dag.id), prefix_label(dag.job, prefix)] += 1
    return [(*labels, n) for labels, n in counts.items()]


class ClusterTotals:
    """Dask's cluster-wide sums (``Scheduler.cumulative_worker_metrics``) as counters that
    never go down.

    Dask adds whatever workers digest to those sums: a negative value makes one go down, a
    NaN or infinite one poisons it for good. Each scrape counts only the finite increases of
    every sum since the previous scrape, the per-job counters' rule (nothing negative, NaN
    or infinite), so ``rate()`` and ``increase()`` stay right. State: one number pair per
    Dask key, as many as Dask itself keeps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # scrapes may come from two servers at once
        self._last: dict[Hashable, float] = {}  # Dask's last finite sum per key
        self._counted: dict[Hashable, float] = {}  # what the counter says per key

    def rows(self, metrics: Iterable[tuple[str, tuple[Any, ...], Any, float]],
             max_length: int) -> list[tuple[str, str, str, float]]:
        """(unit, context, activity, value) rows, summed where two Dask spellings clean
        alike."""
        rows: Counter[tuple[str, str, str]] = Counter()
        with self._lock:
            for context, parts, unit, value in metrics:
                key = (context, parts, unit)
                step = value - self._last.get(key, 0.0)
                counted = self._counted.get(key, 0.0)
                if math.isfinite(step) and step > 0:
                    counted = self._counted[key] = counted + step
                if math.isfinite(value):
                    self._last[key] = value
                rows[safe_unit(str(unit)), clean_label(context, max_length),
                     activity_label(parts, max_length)] += counted
        return [(*labels, value) for labels, value in rows.items()]


def fine_snapshot(scheduler: Any, tracker: JobTracker, ledger: ActivityLedger,
                  cluster: ClusterTotals) -> FineSnapshot:
    """This scrape's series of where the time went, from the scheduler, the tracker and
    the ledger."""
    executing = [
        (worker_label(name, address), tasks)
        for name, address, tasks in dask_internals.executing_tasks(scheduler)
    ]
    return FineSnapshot(
        activities=ledger.series(),
        cluster=cluster.rows(dask_internals.cluster_metrics(scheduler),
                             tracker.label_max_length),
        workers=[(worker_label(w.name, w.address), w)
                 for w in dask_internals.worker_resources(scheduler)],
        prefix_tasks=count_prefix_tasks(executing, tracker.owner, ledger.prefix_label),
    )
