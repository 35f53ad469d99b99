"""What the collector reads from Prometheus, in chunks that stay under the server's limits.

Raw samples come from range-selector instant queries (``metric[Δ]`` evaluated at the end of
each chunk): the timestamps are the real scrape times and nothing is filled in. A chunk the
query engine finds too big (timeout, too many samples) is split in halves and asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.promapi import PrometheusClient, PrometheusError
from dask_metrics.collector.series import (
    Series,
    Timeline,
    WorkerInfo,
    by_metric,
    clip,
    cluster_timeline,
    grid_halver,
    halve_range,
    merge,
    plan_chunks,
    plan_step_chunks,
    worker_inventory,
    worker_timeline,
)
from dask_metrics.contract import CURRENT_DAG, CURRENT_JOB, INFO, WORKER_GPU_INFO, WORKER_TASKS

MAX_POINTS = 11_000  # Prometheus' limit of points per series in one query_range
MAX_SPLITS = 8  # a chunk is halved at most this often (1/256 of it) before giving up
MONITOR_LOOKBACK = ("1h", "1d", "7d", "31d")

Halver = Callable[[int, int], tuple[tuple[int, int], ...] | None]


def label(value: str) -> str:
    """A PromQL string literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def selector(metrics: Sequence[str], worker: str | None = None) -> str:
    """``{__name__=~"a|b",worker="w"}``: one query for several metrics of one worker."""
    matchers = [f'__name__=~{label("|".join(metrics))}']
    if worker is not None:
        matchers.append(f"worker={label(worker)}")
    return "{" + ",".join(matchers) + "}"


def _attempt(run: Callable[[int, int], list[Series]], lo: int, hi: int, halve: Halver,
             depth: int = 0) -> list[Series]:
    try:
        return run(lo, hi)
    except PrometheusError as exc:
        halves = halve(lo, hi) if exc.splittable and depth < MAX_SPLITS else None
        if not halves:
            raise
    return [s for part in halves for s in _attempt(run, *part, halve, depth + 1)]


def _raw_run(client: PrometheusClient, expr: Callable[[str], str], start: int
             ) -> Callable[[int, int], list[Series]]:
    """A query of the window (lo, hi] ([start, hi] for the first), evaluated at hi;
    ``expr`` puts the range (``[3600000ms]``) into the PromQL."""

    def run(lo: int, hi: int) -> list[Series]:
        first = lo == start
        window = hi - lo + (1 if first else 0)  # 1 ms more so a left-open range still has lo
        return clip(client.query(expr(f"[{window}ms]"), hi / 1000), lo, hi, first)

    return run


def fetch_raw(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
              ) -> list[Series]:
    """Every raw sample of ``sel`` in [start, end] (ms), each exactly once."""
    run = _raw_run(client, lambda rng: sel + rng, start)
    return merge(s for lo, hi in plan_chunks(start, end, chunk)
                 for s in _attempt(run, lo, hi, halve_range))


def fetch_label_sets(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
                     ) -> list[dict[str, str]]:
    """The label sets of the series of ``sel`` with a sample in [start, end], without
    transferring their samples (``last_over_time`` keeps one per series and chunk)."""
    run = _raw_run(client, lambda rng: f"last_over_time({sel}{rng})", start)
    found = merge(s for lo, hi in plan_chunks(start, end, chunk)
                  for s in _attempt(run, lo, hi, halve_range))
    return [s.labels for s in found]


def fetch_steps(client: PrometheusClient, expr: str, start: int, end: int, step: int
                ) -> list[Series]:
    """``expr`` on the grid start + k*step within [start, end], in query_range chunks under
    the 11,000-points limit."""

    def run(lo: int, hi: int) -> list[Series]:
        return client.query_range(expr, lo / 1000, hi / 1000, step / 1000)

    return merge(s for lo, hi in plan_step_chunks(start, end, step, MAX_POINTS)
                 for s in _attempt(run, lo, hi, grid_halver(step)))


TRIM_ABOVE_CHUNKS = 4
"""Ranges longer than this many chunks are first narrowed to where the GPU series have
samples: ``--since 1y`` over a week of data costs a week's queries, not a year's."""


def data_span(client: PrometheusClient, start: int, end: int, chunk: int,
              step: int | None = None) -> tuple[int, int]:
    """[start, end] (ms) narrowed to the first and last GPU sample in it, give or take a
    resolution of chunk/64, found by bisection with instant queries whose cost follows the
    samples they cover. A ``step`` grid keeps its points on start + k*step. The range is
    returned as it is when short, or when it holds nothing (the caller says so)."""
    if end - start <= TRIM_ABOVE_CHUNKS * chunk:
        return start, end
    resolution = max(chunk // 64, 1000)

    def any_in(lo: int, hi: int) -> bool:  # a sample in (lo, hi]
        return bool(client.query(f"count(last_over_time({INFO.name}[{hi - lo}ms]))", hi / 1000))

    if not any_in(start - 1, end):
        return start, end
    lo, hi = start - 1, end  # the first sample is in (lo, hi]
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if any_in(start - 1, mid) else (mid, hi)
    first = max(start, lo)
    lo, hi = first, end + 1  # the last sample is in [lo, hi)
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if any_in(mid - 1, end) else (lo, mid)
    last = min(end, hi)
    if step:
        first = start + (first - start) // step * step
    return first, last


def discover_workers(client: PrometheusClient, start: int, end: int, chunk: int
                     ) -> list[WorkerInfo]:
    """Workers with GPU series in [start, end], with addresses from the scheduler preload."""
    gpus = fetch_label_sets(client, INFO.name, start, end, chunk)
    addresses = fetch_label_sets(client, WORKER_GPU_INFO.name, start, end, chunk)
    return worker_inventory(gpus, addresses)


def fetch_cluster(client: PrometheusClient, start: int, end: int, chunk: int) -> Timeline:
    """The cluster-wide job/DAG at each scheduler scrape in [start, end]."""
    series = by_metric(fetch_raw(client, selector([CURRENT_JOB.name,
                                                   CURRENT_DAG.name]), start, end, chunk))
    return cluster_timeline(series.get(CURRENT_JOB.name, []),
                            series.get(CURRENT_DAG.name, []))


def fetch_worker_activity(client: PrometheusClient, worker: str, cluster: Timeline,
                          start: int, end: int, chunk: int) -> Timeline:
    """What ``worker`` ran at each scheduler scrape in [start, end]."""
    tasks = fetch_raw(client, selector([WORKER_TASKS.name], worker), start, end, chunk)
    return worker_timeline(cluster.times, tasks)


def fetch_gpu_series(client: PrometheusClient, worker: str, metrics: Sequence[str], start: int,
                     end: int, chunk: int, step: int | None, max_age: int
                     ) -> dict[str, list[Series]]:
    """{metric: series} of one worker: raw samples, or with ``step`` a grid in which a point
    takes the last raw sample at or before it only when that is at most ``max_age`` old.

    ``last_over_time(m[max_age])`` bounds the look-back: a plain query_range would repeat a
    worker's last value for Prometheus' 5-minute lookback past its end or across a restart
    whose stale markers are missing (a Prometheus restart, backfilled or downsampled data).
    """
    if step is None:
        return by_metric(fetch_raw(client, selector(metrics, worker), start, end, chunk))
    out = {}
    for metric in metrics:
        expr = f"last_over_time({metric}{{worker={label(worker)}}}[{max_age}ms])"
        out[metric] = fetch_steps(client, expr, start, end, step)
    return out


def _without_name(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "__name__"}


def last_monitor_session(client: PrometheusClient, now: float) -> tuple[float, float | None]:
    """(start, stop) of the last monitor session in unix seconds; stop is None while it runs.

    Looks back further and further (up to 31 days) so a short look-back stays cheap.
    """
    for window in MONITOR_LOOKBACK:
        starts = [s for s in client.query(
            f"last_over_time(dask_job_monitor_start_timestamp_seconds[{window}])", now)
            if s.values and s.values[-1] > 0]
        if starts:
            break
    else:
        raise CollectorError("no monitor session in the last 31 days "
                             "(dask_job_monitor_start_timestamp_seconds): give --since a time")
    latest = max(starts, key=lambda s: s.values[-1])
    start = latest.values[-1]
    stops = client.query(f"last_over_time(dask_job_monitor_stop_timestamp_seconds[{window}])",
                         now)
    # The same scheduler's series; whether last_over_time keeps __name__ differs by version.
    stop = next((s.values[-1] for s in stops
                 if _without_name(s.labels) == _without_name(latest.labels)), None)
    return start, (stop if stop is not None and stop >= start else None)
