"""The series of some workers in a range: their GPUs' raw samples or a grid of
them, what each ran when, and how far their exporters' peak samples reach."""

from __future__ import annotations

from collections.abc import Sequence

from dask_metrics.collector.model.series import Series, Timeline, by_metric
from dask_metrics.collector.model.timeline import RAN_METRICS, ran_timeline, within
from dask_metrics.collector.query.presence import lookahead
from dask_metrics.collector.query.reads import fetch_raw, fetch_steps
from dask_metrics.collector.query.refusals import by_values, parts_of
from dask_metrics.collector.query.scope import UNSCOPED, Scope, by_worker, selector
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import EXPORTER_PEAK_WINDOW, EXPORTER_SAMPLE_INTERVAL, WORKER


def fetch_worker_activity(client: PrometheusClient, workers: Sequence[str], cluster: Timeline,
                          start: int, end: int, chunk: int, max_age: int,
                          scope: Scope = UNSCOPED) -> dict[str, Timeline]:
    """What each of ``workers`` ran when in [start, end] (``model.timeline``), in one query."""
    found = fetch_worker_series(client, workers, RAN_METRICS, start, lookahead(end, max_age),
                                chunk, scope)
    return {w: ran_timeline(within(by_metric(series), start, end), cluster.times, end, max_age)
            for w, series in found.items()}


def fetch_gpu_series(client: PrometheusClient, workers: Sequence[str], metrics: Sequence[str],
                     start: int, end: int, chunk: int, step: int | None, max_age: int,
                     scope: Scope = UNSCOPED) -> dict[str, dict[str, list[Series]]]:
    """{worker: {metric: series}} of ``workers``: raw samples (one query for them all), or
    with ``step`` a grid in which a point takes the last raw sample at or before it only
    when that is at most ``max_age`` old (one query per metric).

    ``last_over_time(m[max_age])`` bounds the look-back: a plain query_range would repeat a
    worker's last value for Prometheus' 5-minute lookback past its end or across a restart
    whose stale markers are missing (a Prometheus restart, backfilled or downsampled data).
    """
    if step is None:
        found = fetch_worker_series(client, workers, metrics, start, end, chunk, scope)
        return {w: by_metric(series) for w, series in found.items()}
    out: dict[str, dict[str, list[Series]]] = {w: {} for w in workers}
    for metric in metrics:
        def grid(names: Sequence[str], halve: bool, metric: str = metric
                 ) -> dict[str, list[Series]]:
            expr = f"last_over_time({selector([metric], names, scope)}[{max_age}ms])"
            return by_worker(fetch_steps(client, expr, start, end, step, scope, halve), names)

        question = (WORKER, selector([metric], scope=scope))
        for w, series in by_values(grid, workers, client.series_limits, question).items():
            out[w][metric] = series
    return out


def peak_windows(client: PrometheusClient, start: int, end: int, scope: Scope = UNSCOPED
                 ) -> dict[str, tuple[int, int]]:
    """{worker: (reach, interval)} in ms: how far back each worker's peak samples in
    [start, end] surely reach, its exporter's peak window plus one sampling interval, and
    that interval (the longest, if they changed), as the exporters say them; workers whose
    exporters do not say are absent. A series per worker: by parts of the workers' names
    where a store's limit on series is below them."""
    def longest(metric: str) -> dict[str, float]:
        def ask(more: Sequence[str]) -> dict[str, float]:
            expr = (f"max by ({WORKER}) (max_over_time({scope.of(metric, more)}"
                    f"[{max(end - start, 1)}ms]))")
            return {s.labels.get(WORKER, ""): s.values[-1]
                    for s in client.query(expr, end / 1000) if s.values and s.values[-1] > 0}

        parts = parts_of(client, scope.of(metric), WORKER, start, end)
        return {w: v for part in parts.answers(ask) for w, v in part.items()}

    intervals = longest(EXPORTER_SAMPLE_INTERVAL.name)
    return {worker: (round((window + intervals.get(worker, 0.0)) * 1000),
                     round(intervals.get(worker, 0.0) * 1000))
            for worker, window in longest(EXPORTER_PEAK_WINDOW.name).items()}


def fetch_worker_series(client: PrometheusClient, workers: Sequence[str],
                        metrics: Sequence[str], start: int, end: int, chunk: int,
                        scope: Scope = UNSCOPED) -> dict[str, list[Series]]:
    """Raw samples of the series ``metrics`` of each of ``workers`` in [start, end] (their
    GPUs', resources, what ran on them), one query per chunk for them all
    (``by_values``)."""
    if not metrics:
        return {w: [] for w in workers}

    def raw(names: Sequence[str], halve: bool) -> dict[str, list[Series]]:
        return by_worker(fetch_raw(client, selector(metrics, names, scope), start, end, chunk,
                                   scope, halve=halve), names)

    return by_values(raw, workers, client.series_limits, (WORKER, selector(metrics, scope=scope)))
