"""What the collector reads from Prometheus, in chunks that stay under the server's limits.

Raw samples come from range-selector instant queries (``metric[Δ]`` evaluated at the end
of each chunk), or where ``read_api`` asks for it and the store serves it from Prometheus'
remote-read API or VictoriaMetrics' export API (``PrometheusClient.read_raw``): the
timestamps are the real scrape times and nothing is filled in. A chunk the query engine
finds too big (timeout, too many samples) is split in halves and asked again; a batch of
workers it finds too big (too many series, samples or chunks) is asked again as two halves
of the workers, down to one worker, whose range is then halved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from dask_metrics.collector.model.jobs import DAG_TIMES, JobRow, job_rows, unscraped_note
from dask_metrics.collector.model.lifetimes import job_key, restarts
from dask_metrics.collector.model.series import (
    Series,
    Timeline,
    by_metric,
    clip,
    cluster_timeline,
    grid_halver,
    halve_range,
    merge,
    plan_chunks,
    plan_step_chunks,
)
from dask_metrics.collector.model.timeline import RAN_METRICS, ran_timeline, within
from dask_metrics.collector.query.label_parts import LabelParts, joined, parts_of
from dask_metrics.collector.query.promql import label, literal_matchers, narrower
from dask_metrics.collector.store.client import PrometheusClient, PrometheusError
from dask_metrics.contract import (
    ACTIVITY_FAMILY,
    BUSY,
    CURRENT_DAG,
    CURRENT_JOB,
    DAG_INFO,
    DAG_STATUS,
    DAGS_UNSCRAPED,
    DASK_CLUSTER,
    ENERGY,
    EXPORTER_PEAK_WINDOW,
    EXPORTER_SAMPLE_INTERVAL,
    INFO,
    JOB_ID,
    MEMORY_USED,
    REPLICA_LABELS,
    SCHEDULER_START,
    SPECS,
    UUID,
    WORKER,
    WORKER_DAG_START,
    WORKER_PREFIX_TASKS,
)

MAX_POINTS = 11_000  # Prometheus' limit of points per series in one query_range
MAX_SPLITS = 8  # a chunk is halved at most this often (1/256 of it) before giving up
SERIES_SPLITS = 2
"""How often a chunk refused for a limit on series is halved: a shorter range selects fewer
series only where they come and go (a fleet's DAGs over the day); where they last, halving
would only multiply the refusals."""

Halver = Callable[[int, int], tuple[tuple[int, int], ...] | None]
_T = TypeVar("_T")


def _whole(lo: int, hi: int) -> None:
    """The halver of a query whose range is not halved here (a batch's: its workers are)."""


@dataclass(frozen=True)
class Scope:
    """Which series a query may see: those of one Dask cluster (``cluster``; "" is the
    series without a dask_cluster label, from exporters older than the label; None: every
    cluster, unscoped), with ``replica_labels`` left out of a series' identity (HA replicas'
    copies of one series are one series). Every selector the collector sends is built here,
    so no query forgets the cluster."""

    cluster: str | None = None
    replica_labels: tuple[str, ...] = REPLICA_LABELS

    def matchers(self) -> list[str]:
        return [] if self.cluster is None else [f"{DASK_CLUSTER}={label(self.cluster)}"]

    def of(self, metric: str, more: Sequence[str] = (), **labels: str) -> str:
        """``metric{worker="w",dask_cluster="c"}``: one metric, scoped (``more``: other
        matchers)."""
        found = [f"{k}={label(v)}" for k, v in labels.items()] + [*more] + self.matchers()
        return metric + ("{" + ",".join(found) + "}" if found else "")


UNSCOPED = Scope()


Workers = Sequence[str] | str | None
"""Whose series a query selects: one worker, several (one query for a batch), or all."""

def worker_matchers(workers: Workers) -> list[str]:
    """``worker="w"`` for one worker, ``worker=~"a|b"`` (each name matched literally) for
    several, nothing for None."""
    return literal_matchers(WORKER, workers)


def selector(metrics: Sequence[str], workers: Workers = None, scope: Scope = UNSCOPED,
             more: Sequence[str] = ()) -> str:
    """``{__name__=~"a|b",worker="w",dask_cluster="c"}``: one query for several metrics of
    some workers of one cluster (``more``: other matchers)."""
    matchers = [f'__name__=~{label("|".join(metrics))}', *worker_matchers(workers), *more]
    return "{" + ",".join(matchers + scope.matchers()) + "}"


def by_worker(series: Iterable[Series], workers: Sequence[str], name: str = WORKER
              ) -> dict[str, list[Series]]:
    """``series`` by their worker label (or the label ``name``), each of ``workers`` a key
    (an empty list if none)."""
    out: dict[str, list[Series]] = {w: [] for w in workers}
    for s in series:
        found = out.get(s.labels.get(name, ""))
        if found is not None:
            found.append(s)
    return out


def _attempt(run: Callable[[int, int], list[Series]], lo: int, hi: int, halve: Halver,
             depth: int = 0) -> list[Series]:
    try:
        return run(lo, hi)
    except PrometheusError as exc:
        most = SERIES_SPLITS if exc.series_bound else MAX_SPLITS
        halves = halve(lo, hi) if exc.splittable and depth < most else None
        if not halves:
            raise
    return [s for part in halves for s in _attempt(run, *part, halve, depth + 1)]


def _raw_run(client: PrometheusClient, expr: Callable[[str], str], start: int,
             sel: str | None = None) -> Callable[[int, int], list[Series]]:
    """A query of the window (lo, hi] ([start, hi] for the first), evaluated at hi;
    ``expr`` puts the range (``[3600000ms]``) into the PromQL. With ``sel``, the raw
    samples of that selector, by the client's faster API where it has one."""

    def run(lo: int, hi: int) -> list[Series]:
        first = lo == start
        if sel is not None:
            found = client.read_raw(sel, lo if first else lo + 1, hi)
            if found is not None:
                return clip(found, lo, hi, first)  # whole chunks: samples outside too
        window = hi - lo + (1 if first else 0)  # 1 ms more so a left-open range still has lo
        return clip(client.query(expr(f"[{window}ms]"), hi / 1000), lo, hi, first)

    return run


def _chunked(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
             chunk: int, only: Collection[int] | None = None, sel: str | None = None,
             halve: bool = True) -> Iterator[Series]:
    """The answers of ``expr`` (see ``_raw_run``, and ``sel``) over the chunks of [start,
    end] (those of ``only``, by their place in plan_chunks, if given), a chunk the store
    refuses halved (unless not ``halve``: the refusal is then the caller's)."""
    return (s for _, s in _numbered(client, expr, start, end, chunk, only, sel, halve))


def _numbered(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
              chunk: int, only: Collection[int] | None = None, sel: str | None = None,
              halve: bool = True) -> Iterator[tuple[int, Series]]:
    """``_chunked``'s answers with the place of the chunk each came from."""
    run = _raw_run(client, expr, start, sel)
    halver = halve_range if halve else _whole
    return ((k, s) for k, (lo, hi) in enumerate(plan_chunks(start, end, chunk))
            if only is None or k in only for s in _attempt(run, lo, hi, halver))


def fetch_raw(client: PrometheusClient, sel: str, start: int, end: int, chunk: int,
              scope: Scope = UNSCOPED, only: Collection[int] | None = None,
              halve: bool = True) -> list[Series]:
    """Every raw sample of ``sel`` in [start, end] (ms), each exactly once (HA replicas'
    copies of a series made one by ``scope``'s replica labels); ``only``: of those chunks
    (``_chunked``), where the samples are known to be; ``halve``: whether a chunk the
    store refuses is halved here."""
    return merge(_chunked(client, lambda rng: sel + rng, start, end, chunk, only, sel, halve),
                 scope.replica_labels)


def by_worker_halves(fetch: Callable[[Sequence[str], bool], dict[str, _T]],
                     workers: Sequence[str], refused: dict[str, int] | None = None,
                     kind: str = "") -> dict[str, _T]:
    """``fetch(workers, halve)`` ({worker: its part}), a batch of workers that the store
    refuses as too big asked again as two halves of them, down to one worker, whose query
    alone may halve its range (``halve``). A store's limit on the series one query selects
    (VictoriaMetrics' -search.maxUniqueTimeseries, Mimir's max_fetched_series_per_query,
    Thanos' series limit) is met only by fewer series, which a shorter range of the same
    workers need not give; every other limit (samples, chunks, time) as well by fewer
    workers as by a shorter range.

    ``refused``: {kind of query: the fewest workers refused for a limit on series}, kept
    across batches (``PrometheusClient.refused_batches``): a later batch of as many is
    halved before it is asked, as the store would have had it, without the refusals."""
    if len(workers) < 2:
        return fetch(workers, True)
    if refused is None or len(workers) < refused.get(kind, len(workers) + 1):
        try:
            return fetch(workers, False)
        except PrometheusError as exc:
            if not exc.splittable:
                raise
            if exc.series_bound and refused is not None:
                refused[kind] = min(refused.get(kind, len(workers)), len(workers))
    mid = len(workers) // 2
    return {**by_worker_halves(fetch, workers[:mid], refused, kind),
            **by_worker_halves(fetch, workers[mid:], refused, kind)}


def _none_in_long(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
                  ) -> bool:
    """Whether a range longer than TRIM_ABOVE_CHUNKS chunks holds no sample of ``sel``: one
    query says so, where the chunks would cost one each (a year: 8,760)."""
    return end - start > TRIM_ABOVE_CHUNKS * chunk and not any_sample(client, sel, start, end)


def fetch_label_sets(client: PrometheusClient, sel: str, start: int, end: int, chunk: int,
                     scope: Scope = UNSCOPED) -> list[dict[str, str]]:
    """The label sets of the series of ``sel`` with a sample in [start, end], without
    transferring their samples (``last_over_time`` keeps one per series and chunk)."""
    if _none_in_long(client, sel, start, end, chunk):
        return []
    found = merge((s for _, s in _per_chunk(client, lambda rng: f"last_over_time({sel}{rng})",
                                             start, end, chunk)), scope.replica_labels)
    return [s.labels for s in found]


def label_values(client: PrometheusClient, sel: str, name: str, start: int, end: int,
                 chunk: int) -> set[str]:
    """The values of the label ``name`` of the series of ``sel`` with a sample in [start,
    end]: one series per value comes back (``count by``), however many series hold it."""
    if _none_in_long(client, sel, start, end, chunk):
        return set()
    return {s.labels.get(name, "") for _, s in _per_chunk(
        client, lambda rng: f"count by ({name}) (last_over_time({sel}{rng}))", start, end,
        chunk)}


def fetch_steps(client: PrometheusClient, expr: str, start: int, end: int, step: int,
                scope: Scope = UNSCOPED, halve: bool = True) -> list[Series]:
    """``expr`` on the grid start + k*step within [start, end], in query_range chunks under
    the 11,000-points limit (``halve``: as for ``fetch_raw``)."""

    def run(lo: int, hi: int) -> list[Series]:
        return client.query_range(expr, lo / 1000, hi / 1000, step / 1000)

    halver = grid_halver(step) if halve else _whole
    return merge((s for lo, hi in plan_step_chunks(start, end, step, MAX_POINTS)
                  for s in _attempt(run, lo, hi, halver)), scope.replica_labels)


TRIM_ABOVE_CHUNKS = 4
"""Ranges longer than this many chunks are first narrowed to where the GPU series have
samples: ``--since 1y`` over a week of data costs a week's queries, not a year's."""


def gpu_parts(client: PrometheusClient, sel: str, start: int, end: int,
              ask: Callable[[Sequence[str]], list[_T]]) -> list[_T]:
    """``ask(matchers)`` about every GPU series of ``sel`` in [start, end] (ms), joined:
    asked whole, or where a store will not count them at once for a limit on series, by
    parts of their UUIDs (``label_parts``)."""
    return joined(parts_of(client, sel, UUID, start, end), ask)


def any_sample(client: PrometheusClient, sel: str, start: int, end: int,
               parts: LabelParts | None = None) -> bool:
    """Whether the series of ``sel`` have a sample in [start, end] (ms): one instant query
    (series that a store will not count at once for a limit on series: by ``parts``, until
    one has a sample)."""
    window = max(end - start, 1) + 1

    def ask(more: Sequence[str]) -> bool:
        return bool(client.query(f"count(last_over_time({narrower(sel, more)}[{window}ms]))",
                                 end / 1000))

    return ask(()) if parts is None else any(parts.answers(ask))


def present(client: PrometheusClient, metrics: Sequence[str], start: int, end: int,
            scope: Scope = UNSCOPED) -> set[str]:
    """The ``metrics`` with a sample in [start, end] (ms): one instant query each (by parts
    of their GPUs or workers where a store's limit on series is below them)."""
    return {m for m in metrics if any_sample(client, scope.of(m), start, end, parts_of(
        client, scope.of(m), split_label(m), start, end))}


_LABELS = {spec.name: spec.labels for spec in SPECS}


def split_label(metric: str) -> str:
    """What a question about every series of ``metric`` is split by: its GPUs' UUIDs where
    its series are a GPU's (or it is not ours), else its workers' names."""
    return WORKER if UUID not in _LABELS.get(metric, (UUID,)) else UUID


def data_span(client: PrometheusClient, start: int, end: int, chunk: int,
              step: int | None = None, scope: Scope = UNSCOPED) -> tuple[int, int]:
    """[start, end] (ms) narrowed to the first and last GPU sample in it, give or take a
    resolution of chunk/64: never past a sample. A ``step`` grid keeps its points on start
    + k*step. The range is returned as it is when short, or when it holds nothing (the
    caller says so)."""
    if end - start <= TRIM_ABOVE_CHUNKS * chunk:
        return start, end
    sel = scope.of(INFO.name)
    found = _narrowed(client, sel, start, end, max(chunk // 64, 1000),
                      parts_of(client, sel, UUID, start, end))
    if found is None:
        return start, end
    return on_grid(found[0], start, step), found[1]


def read_span(first: int, last: int, start: int, end: int, margin: int,
              step: int | None = None) -> tuple[int, int]:
    """Where the series of GPU data from ``first`` to ``last`` (data_span) are read: from
    ``margin`` ms before it to as much after, within [start, end], the start on the
    ``step`` grid. What the intervals at its edges need is read: the scheduler's scrapes of
    what ran then. A range read whole and one narrowed to its data then answer alike."""
    return on_grid(max(start, first - margin), start, step), min(end, last + margin)


def on_grid(t: int, start: int, step: int | None) -> int:
    """``t``, or with a ``step`` the grid point start + k*step at or before it."""
    return start + (t - start) // step * step if step else t


def span_of(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
            ) -> tuple[int, int] | None:
    """[start, end] (ms) narrowed to the samples of ``sel`` in it, within a chunk of the
    first and the last (None: there are none): a long range is read there, the same
    samples at the cost of the data rather than of the range (a short one as it is,
    unasked)."""
    if end - start <= TRIM_ABOVE_CHUNKS * chunk:
        return start, end
    return _narrowed(client, sel, start, end, chunk)


def _narrowed(client: PrometheusClient, sel: str, start: int, end: int, resolution: int,
              parts: LabelParts | None = None) -> tuple[int, int] | None:
    """From at most ``resolution`` ms before the first sample of ``sel`` in [start, end] to
    as much after the last (None: there is none), by bisection with instant queries whose
    cost follows the samples they cover (``any_sample``'s ``parts``)."""

    def any_in(lo: int, hi: int) -> bool:  # a sample in (lo, hi]
        return any_sample(client, sel, lo + 1, hi, parts)

    # no sample is from the future (a minute allowed for clocks apart): --until 2099 costs
    # no bisection of the years to come
    end = max(start, min(end, round(time.time() * 1000) + 60_000))
    if not any_in(start - 1, end):
        return None
    lo, hi = start - 1, end  # the first sample is in (lo, hi]
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if any_in(start - 1, mid) else (mid, hi)
    first = max(start, lo)
    lo, hi = first, end + 1  # the last sample is in [lo, hi)
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if any_in(mid - 1, end) else (lo, mid)
    return first, min(end, hi)


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


def lookahead(end: int, by: int) -> int:
    """``end`` + ``by`` (ms), never past now: how far a range's scheduler series are read to
    see what the scheduler recorded about it at its next scrape (an outcome, an end)."""
    return min(end + by, max(round(time.time() * 1000), end))


def fetch_worker_activity(client: PrometheusClient, workers: Sequence[str], cluster: Timeline,
                          start: int, end: int, chunk: int, max_age: int,
                          scope: Scope = UNSCOPED) -> dict[str, Timeline]:
    """What each of ``workers`` ran when in [start, end] (worker_runs), in one query."""
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

        for w, series in by_worker_halves(grid, workers, client.refused_batches,
                                          f"grid {metric}").items():
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


ACTIVITY_SERIES = f"{ACTIVITY_FAMILY}.+_total"  # every unit's family (a regex on __name__)
ATTRIBUTION_METRICS = (BUSY.name, ENERGY.name, MEMORY_USED.name)  # gpu_by_prefix reads these


def fetch_activities(client: PrometheusClient, start: int, end: int, max_age: int, chunk: int,
                     scope: Scope = UNSCOPED, jobs: Sequence[str] | None = None,
                     only: Collection[int] | None = None) -> list[Series]:
    """Every sample of the fine-performance-metric counters of every unit in
    [start - max_age, end], of the job ids ``jobs`` (all by default): the samples before
    ``start`` give each counter's value at the start. ``only``: the chunks of
    [start - max_age, end] (``_chunked``) where they are (``activity_samples``). Where the
    store refuses them for a limit on series, the jobs are asked in halves (``jobs`` None:
    the query is the caller's to split)."""
    if jobs is None:
        return fetch_raw(client, selector([ACTIVITY_SERIES], scope=scope),
                         start - max_age, end, chunk, scope, only)

    def part(ids: Sequence[str], halve: bool) -> dict[str, list[Series]]:
        return by_worker(fetch_raw(client, selector([ACTIVITY_SERIES], scope=scope,
                                                    more=literal_matchers(JOB_ID, ids)),
                                   start - max_age, end, chunk, scope, only, halve),
                         ids, JOB_ID)

    return [s for found in by_worker_halves(part, jobs, client.refused_batches,
                                            "activities").values() for s in found]


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
    limit on series are counted a part of the jobs at a time (``label_parts``)."""
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
        for k, s in _per_chunk(
                client, lambda rng, sel=sel: (f"sum by ({JOB_ID}, {SCHEDULER_START}) "
                                          f"(count_over_time({sel}{rng}))"),
                start - max_age, end, chunk):
            job, n = job_key(s.labels), s.values[-1] if s.values else 0.0
            counts[job] = counts.get(job, 0.0) + n
            if n > 0:
                chunks.setdefault(job, set()).add(k)
    return {job: JobSamples(n, frozenset(chunks.get(job, ()))) for job, n in counts.items()}


def _per_chunk(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
               chunk: int) -> Iterator[tuple[int, Series]]:
    """(chunk's place, an answer) of ``expr`` (an aggregate over a window: ``expr`` puts
    the range into the PromQL) at the end of each chunk of [start, end]: the chunks of one
    length in range queries (on a store's compacted blocks, an instant query per chunk
    looks every series of the block up again: counting a week of a fleet's jobs took 50 s
    that way, 4 in one range query), the last, longer one alone; each window a millisecond
    wider, so that a sample on an edge is in both chunks. A store that refuses a range
    query has those chunks asked one at a time."""
    plan = plan_chunks(start, end, chunk)
    even = len(plan) - 1 if len(plan) > 1 else 0  # the last may be longer: alone
    for a in range(0, even, MAX_POINTS):
        b = min(a + MAX_POINTS, even)
        try:
            found = client.query_range(expr(f"[{chunk + 1}ms]"), plan[a][1] / 1000,
                                       plan[b - 1][1] / 1000, chunk / 1000)
        except PrometheusError as exc:
            if not exc.splittable:
                raise
            yield from _numbered(client, expr, start, end, chunk, range(a, b))
            continue
        for s in found:
            for t, v in zip(s.times, s.values, strict=True):
                yield a + round((t - plan[a][1]) / chunk), Series(s.labels, [t], [v])
    yield from _numbered(client, expr, start, end, chunk, range(even, len(plan)))


def fetch_worker_series(client: PrometheusClient, workers: Sequence[str],
                        metrics: Sequence[str], start: int, end: int, chunk: int,
                        scope: Scope = UNSCOPED) -> dict[str, list[Series]]:
    """Raw samples of the series ``metrics`` of each of ``workers`` in [start, end] (their
    GPUs', resources, what ran on them), one query per chunk for them all
    (``by_worker_halves``)."""
    if not metrics:
        return {w: [] for w in workers}

    def raw(names: Sequence[str], halve: bool) -> dict[str, list[Series]]:
        return by_worker(fetch_raw(client, selector(metrics, names, scope), start, end, chunk,
                                   scope, halve=halve), names)

    return by_worker_halves(raw, workers, client.refused_batches, " ".join(metrics))


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
