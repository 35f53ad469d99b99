"""What the scheduler says of a range: the cluster's job and DAG at each scrape, the
jobs' rows, and which workers executed tasks."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from dask_metrics.collector.model.jobs import DAG_TIMES, JobRow, job_rows, unscraped_note
from dask_metrics.collector.model.lifetimes import restarts
from dask_metrics.collector.model.series import Timeline, by_metric, cluster_timeline
from dask_metrics.collector.query.presence import fetch_label_sets, label_values, lookahead, span_of
from dask_metrics.collector.query.reads import fetch_raw
from dask_metrics.collector.query.refusals import LabelParts
from dask_metrics.collector.query.scope import UNSCOPED, Scope, selector
from dask_metrics.collector.store.client import PrometheusClient, PrometheusError
from dask_metrics.contract import (
    CURRENT_DAG,
    CURRENT_JOB,
    DAG_INFO,
    DAG_STATUS,
    DAGS_UNSCRAPED,
    WORKER,
    WORKER_DAG_START,
    WORKER_PREFIX_TASKS,
)


def fetch_cluster(client: PrometheusClient, start: int, end: int, chunk: int,
                  scope: Scope = UNSCOPED) -> Timeline:
    """The cluster-wide job/DAG at each scheduler scrape in [start, end]."""
    series = by_metric(fetch_raw(client, selector([CURRENT_JOB.name, CURRENT_DAG.name],
                                                  scope=scope), start, end, chunk, scope))
    return cluster_timeline(series.get(CURRENT_JOB.name, []),
                            series.get(CURRENT_DAG.name, []))


def fetch_jobs(client: PrometheusClient, start: int, end: int, chunk: int, lookback: int,
               scope: Scope = UNSCOPED) -> list[JobRow]:
    """The DAGs of [start, end] (ms), with their job's name, client, outcome and edges: the
    raw samples of dask_job_dag_status and the DAG timestamp gauges, from ``lookback`` ms
    before ``start`` (a DAG that ended before the range) to as much after ``end`` (never
    past now: the outcome of a DAG that ended just before the end is scraped after it), and
    only the label sets of dask_job_dag_info (see jobs.job_rows).

    What the rows cannot show is said as a warning: a range over several lives of the
    scheduler, and DAGs the scheduler forgot before any scrape saw them."""
    metrics = [DAG_STATUS.name, *DAG_TIMES, DAGS_UNSCRAPED.name, CURRENT_JOB.name]
    after = lookahead(end, lookback)
    span = span_of(client, selector([*metrics, DAG_INFO.name], scope=scope), start - lookback,
                   after, chunk)
    if span is None:
        return []
    lo, hi = span
    found = by_metric(fetch_raw(client, selector(metrics, scope=scope), lo, hi, chunk, scope))
    info = fetch_label_sets(client, scope.of(DAG_INFO.name), max(start, lo), hi, chunk, scope)
    times = {m: found[m] for m in DAG_TIMES if m in found}
    scrapes = sorted({t for s in found.get(CURRENT_JOB.name, []) for t in s.times})
    rows = job_rows(info, found.get(DAG_STATUS.name, []), start, end, times or None, scrapes)
    for line in (restarts(r.job for r in rows),
                 unscraped_note(found.get(DAGS_UNSCRAPED.name, []), start, end)):
        if line:
            client.warn(line)
    return rows


def executing_workers(client: PrometheusClient, start: int, end: int, chunk: int, age: int,
                      workers: Collection[str], scope: Scope = UNSCOPED) -> set[str]:
    """Those of ``workers`` the scheduler saw executing tasks in [start, end]: with a sample
    of dask_job_worker_prefix_tasks or of a DAG's start on them from ``age`` before the
    start to as much after the end (a DAG that ran just before the end is shown by the next
    scrape). One cheap cluster-wide query (a sample per series and chunk), so that the
    other workers' prefix tasks and busy counters are not asked for (none with an older
    scheduler preload). Over a store's limit on series (a fleet's prefix series), asked by
    parts of the workers' names; a store that finds even those too big has all ``workers``
    read: the same files, in more queries."""
    def ask(more: Sequence[str]) -> set[str]:
        return label_values(client, selector([WORKER_PREFIX_TASKS.name, WORKER_DAG_START.name],
                                             scope=scope, more=more),
                            WORKER, start - age, lookahead(end, age), chunk)

    try:
        found = set().union(*LabelParts(WORKER, lambda: workers).answers(ask))
    except PrometheusError as exc:
        if not exc.splittable:
            raise
        client.warn(f"the store would not say which workers executed tasks "
                    f"({str(exc).splitlines()[0]}): every worker's prefix tasks are read")
        return set(workers)
    return found & set(workers)
