"""The counters of Dask's fine performance metrics (activities.csv), read by job
and only where the store counts their samples."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

from dask_metrics.collector.model.lifetimes import job_key
from dask_metrics.collector.model.series import Series
from dask_metrics.collector.query.presence import label_values
from dask_metrics.collector.query.promql import literal_matchers
from dask_metrics.collector.query.reads import fetch_raw, per_chunk
from dask_metrics.collector.query.refusals import by_values, parts_of
from dask_metrics.collector.query.scope import ACTIVITY_SERIES, UNSCOPED, Scope, by_worker, selector
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import JOB_ID, SCHEDULER_START


def fetch_activities(client: PrometheusClient, start: int, end: int, max_age: int, chunk: int,
                     scope: Scope = UNSCOPED, jobs: Sequence[str] | None = None,
                     only: Collection[int] | None = None) -> list[Series]:
    """Every sample of the fine-performance-metric counters of every unit in
    [start - max_age, end], of the job ids ``jobs`` (all by default): the samples before
    ``start`` give each counter's value at the start. ``only``: the chunks of
    [start - max_age, end] (``_chunked``) where they are (``activity_samples``). Where the
    store refuses them as too big, the jobs are asked in parts (``jobs`` None: the query
    is the caller's to split)."""
    if jobs is None:
        return fetch_raw(client, selector([ACTIVITY_SERIES], scope=scope),
                         start - max_age, end, chunk, scope, only)

    def part(ids: Sequence[str], halve: bool) -> dict[str, list[Series]]:
        return by_worker(fetch_raw(client, selector([ACTIVITY_SERIES], scope=scope,
                                                    more=literal_matchers(JOB_ID, ids)),
                                   start - max_age, end, chunk, scope, only, halve),
                         ids, JOB_ID)

    return [s for found in by_values(part, jobs, client.series_limits,
                                     activity_question(scope)).values() for s in found]


def activity_question(scope: Scope) -> tuple[str, str]:
    """What a limit on the activity counters' series is learnt for: by job id."""
    return JOB_ID, selector([ACTIVITY_SERIES], scope=scope)


class JobSamples(NamedTuple):
    """A job's activity samples, as the store counts them, and the chunks that hold them."""

    samples: float
    chunks: frozenset[int]


def activity_samples(client: PrometheusClient, start: int, end: int, max_age: int, chunk: int,
                     scope: Scope = UNSCOPED) -> dict[str, JobSamples]:
    """{job key: its samples and chunks} of the activity counters that ``fetch_activities``
    reads, counted by the store (instant queries per unit family and time chunk, no sample
    sent): what a fleet's activities are read in batches of jobs by, each batch only where
    its jobs have samples (a job of ten minutes in a day: one or two chunks of 24). A sample
    on a chunk's edge may count twice. Counters the store will not count at once for a
    limit on series are counted a part of the jobs at a time (``refusals``)."""
    parts = parts_of(client, selector([ACTIVITY_SERIES], scope=scope), JOB_ID,
                     start - max_age, end)
    return {job: n for part in parts.answers(
        lambda more: _activity_samples(client, start, end, max_age, chunk, scope, more))
        for job, n in part.items()}


def _activity_samples(client: PrometheusClient, start: int, end: int, max_age: int,
                      chunk: int, scope: Scope, more: Sequence[str]) -> dict[str, JobSamples]:
    """``activity_samples`` of the counters that the matchers ``more`` also select."""
    counts: dict[str, float] = {}
    chunks: dict[str, set[int]] = {}
    # a family at a time: count_over_time drops the metric name, and two units' counters
    # of one task would be one label set (the store refuses the query)
    for name in sorted(label_values(client, selector([ACTIVITY_SERIES], scope=scope,
                                                     more=more),
                                    "__name__", start - max_age, end, chunk)):
        sel = selector([name], scope=scope, more=more)
        for k, s in per_chunk(
                client, lambda rng, sel=sel: (f"sum by ({JOB_ID}, {SCHEDULER_START}) "
                                          f"(count_over_time({sel}{rng}))"),
                start - max_age, end, chunk):
            job, n = job_key(s.labels), s.values[-1] if s.values else 0.0
            counts[job] = counts.get(job, 0.0) + n
            if n > 0:
                chunks.setdefault(job, set()).add(k)
    return {job: JobSamples(n, frozenset(chunks.get(job, ()))) for job, n in counts.items()}
