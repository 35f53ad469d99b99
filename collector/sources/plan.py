"""What a command reads, decided once: the range, where its data lies, the cluster, its
workers and what the cluster ran.

``export``, ``peaks``, the report (an export) and gpu_by_prefix's own reader build this one
object before they read a worker's series, so that each asks the store the same questions
about the same range, and the rest of each command is what it does with the series.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from dask_metrics.collector.model.series import Timeline, WorkerInfo
from dask_metrics.collector.model.timespec import to_ms
from dask_metrics.collector.query.presence import data_span, lookahead, read_span
from dask_metrics.collector.query.ranges import check_range
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.sources.cluster import fetch_cluster
from dask_metrics.collector.sources.discovery import range_workers
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import REPLICA_LABELS


@dataclass(frozen=True)
class Choice:
    """Whose series a command reads: workers by name or glob (None: all), one Dask cluster
    (None: the one the range holds), HA replicas' labels, or every cluster at once."""

    workers: Sequence[str] | None = None
    cluster: str | None = None
    replica_labels: tuple[str, ...] = REPLICA_LABELS
    any_cluster: bool = False

    def named(self) -> Scope:
        """The scope of the cluster named (every cluster where none is, or with any)."""
        return Scope(None if self.any_cluster else self.cluster, self.replica_labels)


@dataclass(frozen=True)
class ReadPlan:
    """A range as a command reads it; times in ms.

    ``start``/``end``: the range asked; ``first``/``final``: its GPU data's span;
    ``lo``/``hi``: what is read, the data and a margin around it; ``outside``: the workers
    with no GPU sample inside (None: no worker has one, the range lies between two
    scrapes); ``timeline``: the cluster's job and DAG at each scheduler scrape of the read.
    """

    start: int
    end: int
    first: int
    final: int
    lo: int
    hi: int
    age: int
    chunk: int
    step: int | None
    scope: Scope
    workers: list[WorkerInfo]
    outside: list[str] | None
    timeline: Timeline

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]


def read_plan(client: PrometheusClient, since: float, until: float, choice: Choice, *,
              max_age: float, chunk: float, step: float | None = None, tail: int = 0,
              margin: int | None = None, reach: int = 0) -> ReadPlan:
    """The plan of [since, until] (unix seconds).

    ``tail`` (ms): how far past the end the data counts (never past now: the first scrape
    after the end dates a peak just before it); ``margin`` (ms, default ``max_age``): how
    far around the data is read; ``reach`` (ms): in a range shorter than ``max_age``, the
    workers scraped this close before and after it count too (``range_workers``).
    """
    check_range(since, until)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    step_ms = to_ms(step) if step else None
    data_end = min(end + tail, max(to_ms(time.time()), end)) if tail else end
    first, final = data_span(client, start, data_end, chunk_ms, step_ms, choice.named())
    lo, hi = read_span(first, final, start, data_end, age if margin is None else margin,
                       step_ms)
    scope, workers, outside = range_workers(client, lo, hi, chunk_ms, choice.workers,
                                            choice.cluster, choice.replica_labels,
                                            choice.any_cluster, reach, age)
    timeline = fetch_cluster(client, lo - age, lookahead(hi, age), chunk_ms, scope)
    return ReadPlan(start, end, first, final, lo, hi, age, chunk_ms, step_ms, scope, workers,
                    outside, timeline)
