"""Which Dask cluster and which workers a range holds: the choice every command makes
before it reads a worker's series."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dask_metrics.collector.errors import ArgumentError, CollectorError, PrometheusError, setting
from dask_metrics.collector.model.series import (
    WorkerInfo,
    natural_key,
    select_workers,
    worker_inventory,
)
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.query.presence import TRIM_ABOVE_CHUNKS, fetch_label_sets, gpu_parts
from dask_metrics.collector.query.promql import narrower
from dask_metrics.collector.query.scope import UNSCOPED, Scope
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import (
    CLUSTER_ENV,
    CLUSTER_OPTION,
    DASK_CLUSTER,
    INFO,
    REPLICA_LABELS,
    WORKER_GPU_INFO,
)

Progress = Callable[[float, int, str, int | None], None]
"""Told (workers done, workers in all, the worker now, rows written so far or None) as a
command goes over the workers; done counts a batch's chunks of a long range as fractions."""


def clusters_in(client: PrometheusClient, start: int, end: int) -> list[str]:
    """The dask_cluster values of the GPU series with a sample in [start, end] (ms), sorted
    ("" for series without one): one instant query, whatever the range (by parts of the
    GPUs where a store's limit on series is below them)."""
    window = max(end - start, 1) + 1
    found = gpu_parts(client, INFO.name, start, end, lambda more: client.query(
        f"count by ({DASK_CLUSTER}) (last_over_time({narrower(INFO.name, more)}"
        f"[{window}ms]))", end / 1000))
    return clusters_of([series.labels for series in found])


def discover(client: PrometheusClient, start: int, end: int, chunk: int,
             scope: Scope = UNSCOPED) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The label sets of dask_gpu_info and dask_job_worker_gpu_info in [start, end]: the
    clusters (their dask_cluster labels) and their workers, from the same two queries (on a
    store that refuses them for a limit on series, by parts of the GPUs' UUIDs)."""
    def label_sets(metric: str) -> list[dict[str, str]]:
        return gpu_parts(client, scope.of(metric), start, end, lambda more: fetch_label_sets(
            client, scope.of(metric, more), start, end, chunk, scope))

    return label_sets(INFO.name), label_sets(WORKER_GPU_INFO.name)


def clusters_of(label_sets: Sequence[dict[str, str]]) -> list[str]:
    """The dask_cluster values among ``label_sets``, sorted; "" for series without one."""
    return sorted({labels.get(DASK_CLUSTER, "") for labels in label_sets})


def in_cluster(label_sets: Sequence[dict[str, str]], cluster: str | None
               ) -> list[dict[str, str]]:
    if cluster is None:
        return list(label_sets)
    return [labels for labels in label_sets if labels.get(DASK_CLUSTER, "") == cluster]


def cluster_names(clusters: Sequence[str]) -> str:
    """``'ml-a', 'ml-b'`` for a message; "" reads as the series without the label."""
    return ", ".join(repr(c) if c else f"'' (series without a {DASK_CLUSTER} label)"
                     for c in clusters)


class NoGpuSeries(CollectorError):
    """No GPU series in the range asked for."""


def chosen_cluster(found: Sequence[str], cluster: str | None, any_cluster: bool, span: str,
                   url: str) -> str | None:
    """The cluster an export reads, from the clusters ``found`` in its range: the one named,
    the only one, or None (every cluster) with ``any_cluster``; raises NoGpuSeries (none
    found, or not the one named: a range between two scrapes is then widened) or
    ArgumentError (several, none named) saying what was found."""
    if not found:
        raise NoGpuSeries(f"no GPU series (dask_gpu_info) {span} at {url}: is "
                             "Prometheus scraping the GPU exporters, and is the time range right?")
    if any_cluster:
        return None
    if cluster is None:
        if len(found) > 1:
            raise ArgumentError("cluster", "not given", f"while Prometheus holds GPU series of "
                                f"{len(found)} Dask clusters {span}: {cluster_names(found)}",
                                f"choose one with {setting('cluster')} NAME")
        return found[0]
    if cluster not in found:
        raise NoGpuSeries(f"no GPU series of Dask cluster {cluster!r} {span} (clusters: "
                             f"{cluster_names(found)}): if one of those is this cluster, its GPU "
                             "exporters name it differently from its scheduler; give the "
                             f"scheduler and every exporter the same {CLUSTER_OPTION} NAME "
                             f"({CLUSTER_ENV}=NAME)")
    return cluster


def find_workers(client: PrometheusClient, start: int, end: int, chunk: int,
                 patterns: Sequence[str] | None, cluster: str | None = None,
                 replica_labels: Sequence[str] = REPLICA_LABELS, any_cluster: bool = False
                 ) -> tuple[Scope, list[WorkerInfo]]:
    """The Dask cluster of [start, end] (ms) and its workers with GPU series that
    ``patterns`` select.

    ``cluster`` names the cluster (its dask_cluster label; "" for series without one); when
    None, the range must hold one cluster, which is then taken. ``any_cluster``: no scoping at
    all (every series, whatever its cluster). The clusters are the dask_cluster values of
    dask_gpu_info in the range, read by the same queries that find the workers (those of
    the cluster named only, where one is).

    Raises ArgumentError when several clusters are found and none is named (the message lists
    them), CollectorError when there is no GPU series, no such cluster or no such worker.
    """
    span = f"between {format_rfc3339(start)} and {format_rfc3339(end)}"
    # a cluster named is read alone: a shared store's other clusters are not sent (nor
    # counted against its limit on series); where it has nothing, the clusters there say why
    named = None if any_cluster else cluster
    scope = Scope(named, tuple(replica_labels))
    if end - start > TRIM_ABOVE_CHUNKS * chunk and named is None:  # one query first: the
        _clusters_say(client, start, end, cluster, any_cluster, span)  # chunks cost one each
    gpus, addresses = discover(client, start, end, chunk, scope)
    if named is not None and not gpus:
        _clusters_say(client, start, end, cluster, any_cluster, span)
    cluster = chosen_cluster(clusters_of(gpus), cluster, any_cluster, span, client.url)
    scope = Scope(cluster, tuple(replica_labels))
    workers = worker_inventory(in_cluster(gpus, cluster), in_cluster(addresses, cluster))
    try:
        return scope, select_workers(workers, patterns)
    except LookupError as exc:
        known = ", ".join(w.name for w in workers[:10]) + (", …" if len(workers) > 10 else "")
        raise CollectorError(f"no worker matches {exc.args[0]!r} {span} (workers: {known})"
                             ) from None


def _clusters_say(client: PrometheusClient, start: int, end: int, cluster: str | None,
                  any_cluster: bool, span: str) -> None:
    """``chosen_cluster`` of the clusters in [start, end]: raises where the cluster named is
    not there or none is named and several are, saying which are; a store that will not
    count them for a limit on series is said so of the cluster named."""
    named = cluster is not None and not any_cluster
    try:
        found = clusters_in(client, start, end)
    except PrometheusError as exc:
        if not named or not exc.series_bound:
            raise
        raise NoGpuSeries(f"no GPU series of Dask cluster {cluster!r} {span} (the store "
                          f"would not list its clusters: {str(exc).splitlines()[0]})") from None
    chosen_cluster(found, cluster, any_cluster, span, client.url)


def range_workers(client: PrometheusClient, lo: int, hi: int, chunk: int,
                  patterns: Sequence[str] | None, cluster: str | None,
                  replica_labels: Sequence[str], any_cluster: bool, reach: int, age: int
                  ) -> tuple[Scope, list[WorkerInfo], list[str] | None]:
    """``find_workers`` of [lo, hi] (ms), and where the range is shorter than ``age`` (an
    interval across it still counts), the workers scraped within ``reach`` before and after
    it with no sample inside: in a range shorter than a scrape interval, a worker scraped at
    another phase than the others holds its jobs' share in the interval across the range,
    and left out, its jobs would read no GPU at all.

    Returns (scope, workers in name order, the names of those with no sample inside; None
    where no worker has one, the range lying between two scrapes). Raises NoGpuSeries where
    no worker has a sample inside or an interval across the range."""
    try:
        scope, found = find_workers(client, lo, hi, chunk, patterns, cluster, replica_labels,
                                    any_cluster)
    except NoGpuSeries as exc:
        if hi - lo >= min(reach, age):  # not a range between two scrapes
            raise
        none_inside: NoGpuSeries | None = exc
        scope, found = find_workers(client, max(lo - reach, 0), hi + reach, chunk, patterns,
                                    cluster, replica_labels, any_cluster)[0], []
    else:
        none_inside = None
        if not reach or hi - lo >= age:
            return scope, found, []

    def around(a: int, b: int) -> dict[str, WorkerInfo]:
        try:
            return {w.name: w for w in find_workers(client, a, b, chunk, patterns, scope.cluster,
                                                    scope.replica_labels, any_cluster)[1]}
        except PrometheusError:  # the store failed: said, not taken for nobody
            raise
        except CollectorError:  # nobody there (or no worker of ``patterns``)
            return {}

    known = {w.name for w in found}
    before = around(max(lo - reach, 0), lo - 1)
    after = around(hi + 1, hi + reach) if before.keys() - known else {}
    added = sorted(before.keys() & after.keys() - known, key=natural_key)
    if none_inside is not None and not added:  # scraped around it, never across it
        raise none_inside
    workers = sorted([*found, *(before[n] for n in added)], key=lambda w: natural_key(w.name))
    return scope, workers, added if none_inside is None else None
