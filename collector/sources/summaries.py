"""The per-job summaries an export writes beside the workers' files (activities.csv,
gpu_by_prefix.csv), also read on their own (``read_activities``, ``read_gpu_by_prefix``:
Monitor's ``activities()`` and ``gpu_by_prefix()``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dask_metrics.collector.attribution.activities import Increases, activity_rows
from dask_metrics.collector.attribution.gpu_by_prefix import PrefixUses, prefix_rows, seen_by
from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.model.lifetimes import job_order, plain
from dask_metrics.collector.model.series import plan_chunks
from dask_metrics.collector.model.timespec import to_ms
from dask_metrics.collector.query.batches import (
    SAMPLES_PER_QUERY,
    batches_of,
    samples_per_gpu,
    worker_batches,
)
from dask_metrics.collector.query.pieces import pieces
from dask_metrics.collector.query.presence import span_of
from dask_metrics.collector.query.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE, check_range
from dask_metrics.collector.query.scope import ACTIVITY_SERIES, ATTRIBUTION_METRICS, Scope, selector
from dask_metrics.collector.sources.activity_counts import (
    activity_question,
    activity_samples,
    fetch_activities,
)
from dask_metrics.collector.sources.cluster import executing_workers, fetch_jobs
from dask_metrics.collector.sources.plan import Choice, read_plan
from dask_metrics.collector.sources.session_window import SCRAPE_GAP
from dask_metrics.collector.sources.worker_fetch import fetch_piece
from dask_metrics.collector.store.client import PrometheusClient, PrometheusError
from dask_metrics.contract import REPLICA_LABELS


def activity_table(client: PrometheusClient, start: int, end: int, age: int, chunk: int,
                   scope: Scope, names: Mapping[str, str], limit: float = SAMPLES_PER_QUERY
                   ) -> Iterator[list[dict[str, Any]]]:
    """activities.csv's rows of [start, end] (ms), jobs named by ``names``, a batch of jobs'
    rows at a time, in the file's order.

    A fleet's jobs have millions of activity samples in an hour: they are read a batch of
    jobs at a time (``limit``: the samples of a batch; jobs in the file's order, each job of
    a scheduler's life in one batch), a few chunks of a batch at a time (as many as hold
    ``limit`` samples) folded into its increases (``Increases``, the whole range's to the
    bit) before the next are read, and only from the chunks that hold its jobs' samples
    (and the last: one batch reads every job, those that began since they were counted
    too). What is held is a batch's samples and rows, whatever the range."""
    # the counters' samples from where they begin: the same samples as from start - age
    try:
        span = span_of(client, selector([ACTIVITY_SERIES], scope=scope), start - age, end,
                       chunk)
    except PrometheusError as exc:  # the cluster's counters over a limit on series
        if not exc.series_bound:
            raise
        span = (start - age, end)  # the same samples, read from where the range begins
    if span is None:
        return
    begin, end = span[0] + age, span[1]
    counted = activity_samples(client, begin, end, age, chunk, scope)
    batches = batches_of(sorted(((job, found.samples) for job, found in counted.items()),
                                key=lambda item: job_order(item[0])), limit)
    last = len(plan_chunks(begin - age, end, chunk)) - 1
    for jobs in batches:
        only = sorted({last}.union(*(counted[job].chunks for job in jobs)))
        # a batch's chunks a few at a time, as many as hold ``limit`` samples: a job that
        # runs all week is not held whole
        per_chunk = sum(counted[job].samples / max(len(counted[job].chunks), 1) for job in jobs)
        group = max(1, int(limit // max(per_chunk, 1.0)))
        ids = sorted({plain(job) for job in jobs}) if len(batches) > 1 else None
        fold = Increases(start)
        for k in range(0, len(only), group):
            while True:
                try:
                    fold.add(fetch_activities(client, begin, end, age, chunk, scope, ids,
                                              only[k:k + group]))
                    break
                except PrometheusError as exc:  # every job's counters at once: too many series
                    if ids is not None or not exc.series_bound:
                        raise
                    ids = sorted({plain(job) for job in jobs})
                    # as many were just refused: the parts are asked at once
                    client.series_limits.refused(activity_question(scope), len(ids))
        totals = fold.result()
        if ids is not None:  # another life of a job id is another batch's
            mine = set(jobs)
            totals = {key: v for key, v in totals.items() if key[0] in mine}
        yield activity_rows(totals, names)


def job_names(client: PrometheusClient, start: int, end: int, chunk: int, age: int,
              scope: Scope) -> Mapping[str, str]:
    """{job id: name} as jobs.csv names them."""
    return JobNames.from_rows(fetch_jobs(client, start, end, chunk, age, scope)).names


def read_activities(client: PrometheusClient, since: float, until: float, *,
                    cluster: str | None = None, any_cluster: bool = False,
                    replica_labels: Sequence[str] = REPLICA_LABELS,
                    max_age: float = DEFAULT_MAX_AGE, chunk: float = DEFAULT_CHUNK
                    ) -> list[dict[str, Any]]:
    """activities.csv's rows for [since, until] (unix seconds), as dicts keyed by
    ACTIVITY_COLUMNS (value a float); ``cluster`` None reads every cluster."""
    check_range(since, until)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    scope = Scope(None if any_cluster else cluster, tuple(replica_labels))
    return [row for rows in activity_table(client, start, end, age, chunk_ms, scope,
                                           job_names(client, start, end, chunk_ms, age, scope))
            for row in rows]


def read_gpu_by_prefix(client: PrometheusClient, since: float, until: float, *,
                       cluster: str | None = None, any_cluster: bool = False,
                       replica_labels: Sequence[str] = REPLICA_LABELS,
                       max_age: float = DEFAULT_MAX_AGE, chunk: float = DEFAULT_CHUNK
                       ) -> list[dict[str, Any]]:
    """gpu_by_prefix.csv's rows for [since, until] (unix seconds), as dicts keyed by
    GPU_BY_PREFIX_COLUMNS (numbers as floats, None where unknown); the cluster as for
    ``find_workers``."""
    plan = read_plan(client, since, until, Choice(None, cluster, tuple(replica_labels),
                                                  any_cluster),
                     max_age=max_age, chunk=chunk, reach=to_ms(min(SCRAPE_GAP, max_age)))
    start, end, lo, hi, age, chunk_ms = (plan.start, plan.end, plan.lo, plan.hi, plan.age,
                                         plan.chunk)
    scope, chosen, timeline = plan.scope, plan.workers, plan.timeline
    executed = executing_workers(client, lo, hi, chunk_ms, age, plan.names, scope)
    uses = PrefixUses(age, seen_by(chosen), (start, end))
    ran = [info for info in chosen if info.name in executed]  # the others add nothing
    per_gpu = samples_per_gpu(client, lo, hi, chunk_ms, len(ATTRIBUTION_METRICS), None, scope)
    for batch in worker_batches(ran, per_gpu):  # a piece of the range at a time
        for piece in pieces(lo, hi, start, end, chunk_ms, age):
            known, found = fetch_piece(client, [w.name for w in batch], (), timeline, piece,
                                       chunk_ms, None, age, scope, executed)
            for data in found.values():
                uses.add_worker(known.times, data.prefixes, data.attribution, data.ran,
                                piece.window)
    return prefix_rows(uses.result(), job_names(client, start, end, chunk_ms, age, scope))
