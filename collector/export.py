"""``export``: per-worker GPU series from Prometheus to CSV files, workers.csv and export.json.

One worker is joined and written while the next one is fetched (the client mostly waits for
Prometheus then), so memory is bounded by two workers' data. Everything is written into a
hidden staging folder beside ``out`` and moved into place only when the whole export
succeeded: a failed export leaves no file behind.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar, cast

import requests

from dask_metrics import __version__
from dask_metrics.collector.activities import activity_rows, increases
from dask_metrics.collector.columns import (
    DEFAULT_NAMES,
    WHEN_PRESENT,
    Column,
    is_default,
    select,
    source_metrics,
    worker_metrics,
)
from dask_metrics.collector.errors import ArgumentError, CollectorError, setting
from dask_metrics.collector.fetch import (
    ATTRIBUTION_METRICS,
    TRIM_ABOVE_CHUNKS,
    Scope,
    clusters_in,
    clusters_of,
    data_span,
    discover,
    fetch_activities,
    fetch_cluster,
    fetch_gpu_series,
    fetch_jobs,
    fetch_worker_series,
    in_cluster,
    lookahead,
    prefix_workers,
    present,
)
from dask_metrics.collector.gpu_by_prefix import PrefixUses, prefix_rows, seen_by
from dask_metrics.collector.holes import holes, warnings_of
from dask_metrics.collector.jobs import JobNames, jobs_csv_rows
from dask_metrics.collector.layouts import (
    LAYOUTS,
    WORKERS_HEADER,
    csv_line,
    format_value,
    safe_file_names,
    seed_header,
    seed_lines,
    tidy_header,
    tidy_lines,
    workers_rows,
)
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.series import (
    Samples,
    Series,
    Timeline,
    WorkerInfo,
    WorkerTable,
    by_metric,
    joined_by_metric,
    select_workers,
    worker_inventory,
    worker_table,
)
from dask_metrics.collector.timespec import format_duration, format_rfc3339, to_ms
from dask_metrics.collector.worker_runs import RAN_METRICS, ran_timeline, within
from dask_metrics.contract import (
    ACTIVITIES_CSV,
    ACTIVITY_COLUMNS,
    CLUSTER_ENV,
    CLUSTER_OPTION,
    DASK_CLUSTER,
    GPU_BY_PREFIX_COLUMNS,
    GPU_BY_PREFIX_CSV,
    JOBS_COLUMNS,
    JOBS_CSV,
    REPLICA_LABELS,
    WORKER_PREFIX_TASKS,
)

DEFAULT_MAX_AGE = 120.0
"""Seconds: how old a sample may be and still describe a later time (a --step grid point, or
the job/DAG state of a GPU sample). Bridges missed scrapes, not a worker restart."""
DEFAULT_CHUNK = 3600.0
"""Seconds of raw samples asked for in one query; halved automatically when too big."""

Progress = Callable[[int, int, str], None]
Visit = Callable[[WorkerInfo, Mapping[str, list[Series]], Timeline, WorkerTable], None]
"""Called with each worker's fetched series, activity and table as it is written: what the
session report computes from the very data of the export."""
Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class ExportResult:
    out: Path
    workers: list[str]
    files: list[str]  # the worker files' names, in ``workers`` order (even if not written)
    rows: int
    warnings: list[str]
    cluster: str | None = None
    store_note: str | None = None  # what this store's export holds differently (NaN dropped)
    inventory: list[WorkerInfo] = field(default_factory=list)  # the workers, as found


SUMMARIES = (ACTIVITIES_CSV, GPU_BY_PREFIX_CSV)
"""The per-job files of every export, beside the workers' files (export.json's "summaries")."""


class WorkerData(NamedTuple):
    """What one worker's part of an export reads from Prometheus."""

    gpu: dict[str, list[Series]]  # the columns' series (raw, or on the --step grid)
    ran: Timeline  # what it ran when (worker_runs)
    resources: dict[str, Samples]  # the worker columns' series
    prefixes: list[Series]  # dask_job_worker_prefix_tasks
    attribution: dict[str, list[Series]]  # raw busy, energy and memory used


def fetch_worker(client: PrometheusClient, worker: str, columns: Sequence[Column],
                 timeline: Timeline, lo: int, hi: int, chunk: int, step: int | None,
                 age: int, scope: Scope, executed: bool, extra: Sequence[str] = ()
                 ) -> WorkerData:
    """One worker's series: its GPUs' columns and its scheduler series (tasks, the worker
    columns', prefix tasks), one query each.

    ``executed``: the worker has dask_job_worker_prefix_tasks series in the range
    (``prefix_workers``); only then are they and gpu_by_prefix's raw counters read, the
    counters not among the columns' in a third query sent at the same time as the columns'
    (in a thread: the server answers both at once), raw also with ``step``. A worker without
    them adds nothing to gpu_by_prefix.csv, and data from an older scheduler preload costs
    no more series. ``extra``: more series of the worker, raw, fetched with the columns'
    (without ``step``)."""
    metrics = source_metrics(columns) + [m for m in extra if step is None]
    apart_metrics = ([m for m in ATTRIBUTION_METRICS if m not in metrics or step]
                     if executed else [])
    raw = _Background(lambda names: fetch_gpu_series(client, worker, names, lo, hi, chunk, None,
                                                      age, scope),
                      apart_metrics) if apart_metrics else None
    gpu = fetch_gpu_series(client, worker, metrics, lo, hi, chunk, step, age, scope)
    apart = raw.result() if raw is not None else {}
    attribution = {m: source[m] for m in ATTRIBUTION_METRICS
                   if m in (source := apart if m in apart_metrics else gpu)} if executed else {}
    resources = worker_metrics(columns)
    sched = [*resources, *RAN_METRICS, *([WORKER_PREFIX_TASKS.name] if executed else [])]
    found = within(by_metric(fetch_worker_series(client, worker, sched, lo - age,
                                                 lookahead(hi, age), chunk, scope)), lo - age, hi)
    return WorkerData(gpu, ran_timeline(found, timeline.times, hi, age),
                      joined_by_metric({m: found[m] for m in resources if m in found}),
                      found.get(WORKER_PREFIX_TASKS.name, []), attribution)


def summary_lines(rows: Iterable[Mapping[str, Any]], header: Sequence[str]) -> Iterator[str]:
    """CSV lines of activities.csv or gpu_by_prefix.csv rows: numbers as in the workers'
    files, None empty."""
    for row in rows:
        yield csv_line(v if isinstance(v, str) else format_value(v)
                       for v in (row[k] for k in header))


def cluster_names(clusters: Sequence[str]) -> str:
    """``'ml-a', 'ml-b'`` for a message; "" reads as the series without the label."""
    return ", ".join(repr(c) if c else f"'' (series without a {DASK_CLUSTER} label)"
                     for c in clusters)


class NoGpuSeries(CollectorError):
    """No GPU series in the range asked for."""


def chosen_cluster(found: Sequence[str], cluster: str | None, any_cluster: bool, span: str,
                   url: str) -> str | None:
    """The cluster an export reads, from the clusters ``found`` in its range: the one named,
    the only one, or None (every cluster) with ``any_cluster``; raises CollectorError or
    ArgumentError saying what was found."""
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
        raise CollectorError(f"no GPU series of Dask cluster {cluster!r} {span} (clusters: "
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
    dask_gpu_info in the range, read by the same queries that find the workers.

    Raises ArgumentError when several clusters are found and none is named (the message lists
    them), CollectorError when there is no GPU series, no such cluster or no such worker.
    """
    span = f"between {format_rfc3339(start)} and {format_rfc3339(end)}"
    if end - start > TRIM_ABOVE_CHUNKS * chunk:  # one query first: the chunks cost one each
        chosen_cluster(clusters_in(client, start, end), cluster, any_cluster, span, client.url)
    gpus, addresses = discover(client, start, end, chunk, Scope(None, tuple(replica_labels)))
    cluster = chosen_cluster(clusters_of(gpus), cluster, any_cluster, span, client.url)
    scope = Scope(cluster, tuple(replica_labels))
    workers = worker_inventory(in_cluster(gpus, cluster), in_cluster(addresses, cluster))
    try:
        return scope, select_workers(workers, patterns)
    except LookupError as exc:
        known = ", ".join(w.name for w in workers[:10]) + (", …" if len(workers) > 10 else "")
        raise CollectorError(f"no worker matches {exc.args[0]!r} {span} (workers: {known})"
                             ) from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off (reference counting still frees everything),
    back on afterwards only if it was on. Also a decorator: ``@gc_paused()``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def prefetched(fetch: Callable[[Item], Result], items: Iterable[Item]) -> Iterator[Result]:
    """``fetch(item)`` of each item in order, the next one fetched in a thread while the caller
    works on this one. ``fetch`` runs in those threads only, one call at a time."""
    todo = iter(items)
    ahead = next((_Background(fetch, item) for item in todo), None)
    while ahead is not None:
        value = ahead.result()
        ahead = next((_Background(fetch, item) for item in todo), None)
        yield value


class _Background(Generic[Item, Result]):
    """``fn(arg)`` in a daemon thread. Daemon: a request stuck on a silent server never holds
    the process's exit after SIGTERM or Ctrl-C. The wait wakes up every 0.2 s because
    Python runs signal handlers in the main thread only, and the kernel may hand the signal
    to this thread, blocked in a socket: a wait without a timeout would never see it."""

    def __init__(self, fn: Callable[[Item], Result], arg: Item) -> None:
        self._done = threading.Event()
        self._value: Result | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn, arg), daemon=True).start()

    def _run(self, fn: Callable[[Item], Result], arg: Item) -> None:
        try:
            self._value = fn(arg)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> Result:
        while not self._done.wait(0.2):
            pass
        if self._error is not None:
            raise self._error
        return cast(Result, self._value)


def check_range(since: float, until: float) -> None:
    if not since < until:
        raise ValueError(f"the start ({format_rfc3339(to_ms(since))}) must be before the end "
                         f"({format_rfc3339(to_ms(until))})")


MAX_STEP_ROWS = 5_000_000
"""Grid points per GPU that ``--step`` may ask for: a 1 s grid over eight weeks. Finer
than that is a mistyped step (1ms for 1m), not an analysis; raw samples need no grid."""


def check_step(since: float, until: float, step: float) -> None:
    """A grid of ``step`` over [since, until] has more than one point and not millions."""
    span, points = until - since, (until - since) / step
    if points < 1:
        raise ArgumentError("step", format_duration(step),
                            f"is longer than the range ({format_duration(span)})",
                            "give a shorter step, or none for raw samples")
    if points > MAX_STEP_ROWS:
        raise ArgumentError("step", format_duration(step),
                            f"over {format_duration(span)} makes {points:,.0f} rows per GPU "
                            f"(at most {MAX_STEP_ROWS:,})",
                            "give a longer step, or none for the raw samples as scraped")


# No reference cycles are created; the decoded JSON's many lists would trigger repeated full
# collections (about an eighth of an export's time).
@gc_paused()
def export(client: PrometheusClient, since: float, until: float, out: str | os.PathLike[str],
           *, metrics: Sequence[str] | None = None, step: float | None = None,
           max_age: float = DEFAULT_MAX_AGE, layout: str = "tidy",
           workers: Sequence[str] | None = None, chunk: float = DEFAULT_CHUNK,
           progress: Progress | None = None, asked: Mapping[str, Any] | None = None,
           cluster: str | None = None, replica_labels: Sequence[str] = REPLICA_LABELS,
           any_cluster: bool = False, visit: Visit | None = None,
           worker_files: bool = True, visit_metrics: Sequence[str] = (),
           visit_tail: float = 0.0, visit_head: float = 0.0, reach: float = 0.0,
           tables: str = "") -> ExportResult:
    """Write the GPU series of [since, until] (unix seconds) into the folder ``out``.

    ``metrics``: column names (all by default); ``step``: seconds of a resampling grid (raw
    samples by default); ``layout``: "tidy" or "seed"; ``workers``: names or globs;
    ``progress(done, total, worker)`` is called before each worker is fetched (in the
    fetching thread) and once at the end; ``asked`` is recorded in export.json as what the
    user asked (the command line's own words); ``cluster``, ``replica_labels`` and
    ``any_cluster`` as for ``find_workers``; ``visit`` sees each worker's data (see
    ``Visit``) and, with ``visit_metrics``, those series' raw samples too (no column), and
    ``visit_tail`` seconds more of its GPU series past ``until`` (never past now: the
    first scrape after the end dates a peak just before it) and ``visit_head`` seconds before
    ``since`` (the scrape interval across the start), which no file holds;
    ``worker_files`` False writes no per-worker CSV file (the session report,
    which keeps the tables its plots need from ``visit``: export.json then lists no
    files); ``tables``: a subfolder of ``out`` for workers.csv, jobs.csv and the summaries
    ("": beside the worker files), so that ``out``'s own CSV files are the workers' alone.
    ``reach``: a range with no GPU sample inside (shorter than one scrape) takes the workers
    scraped within this many seconds before and after it (for ``visit``'s edges).
    Raises ValueError for bad arguments and CollectorError (PrometheusError included) when
    the export fails.
    """
    if tables and (Path(tables).name != tables or tables in (".", "..")):
        raise ValueError(f"tables {tables!r}: must be a plain folder name")
    check_range(since, until)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    if step:
        check_step(since, until, step)
    columns = select(metrics)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    step_ms = to_ms(step) if step else None
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise CollectorError(f"{target} exists and is not a folder: choose another one")
    warnings_before = len(client.warnings)

    named = Scope(None if any_cluster else cluster, tuple(replica_labels))
    lo, hi = data_span(client, start, end, chunk_ms, step_ms, named)  # the data, not the range
    try:
        scope, chosen = find_workers(client, lo, hi, chunk_ms, workers, cluster, replica_labels,
                                     any_cluster)
    except NoGpuSeries:
        if hi - lo >= to_ms(reach):  # not a range between two scrapes
            raise
        scope, chosen = find_workers(client, max(lo - to_ms(reach), 0), hi + to_ms(reach),
                                     chunk_ms, workers, cluster, replica_labels, any_cluster)
    if is_default(metrics) and layout == "tidy":  # the seed layout is the original's files
        found = present(client, [c.metric for c in WHEN_PRESENT], lo - age, hi, scope)
        columns = select([*DEFAULT_NAMES, *(c.name for c in WHEN_PRESENT if c.metric in found)])
    timeline = fetch_cluster(client, lo - age, hi, chunk_ms, scope)
    executed = prefix_workers(client, lo - age, hi, chunk_ms, scope)
    names = safe_file_names([w.name for w in chosen], layout)

    # past the data's end, never further than the tail asked for beyond it: a range whose
    # data ended long before its end costs no chunks of nothing
    tail_end = max(hi, min(end + to_ms(visit_tail), hi + to_ms(visit_tail),
                           to_ms(time.time()))) if visit else hi

    def fetch(i: int) -> tuple[WorkerData, dict[str, list[Series]]]:
        worker = chosen[i].name
        if progress:
            progress(i, len(chosen), worker)
        data = fetch_worker(client, worker, columns, timeline, lo, hi, chunk_ms, step_ms, age,
                            scope, worker in executed, visit_metrics)
        if tail_end <= hi and not visit_head:
            return data, data.gpu
        outside = [*source_metrics(columns), *visit_metrics]
        more = fetch_gpu_series(client, worker, outside, hi, tail_end, chunk_ms, None, age,
                                scope) if tail_end > hi else {}
        head = fetch_gpu_series(client, worker, outside, lo - to_ms(visit_head), lo,
                                chunk_ms, None, age, scope) if visit_head else {}
        return data, {m: [*head.get(m, []), *data.gpu.get(m, []), *more.get(m, [])]
                      for m in data.gpu.keys() | more.keys() | head.keys()}

    rows_written = 0
    uses = PrefixUses(age, seen_by(chosen))
    missing: list[tuple[str, tuple[int, int]]] = []
    with _staging(target) as stage, _files_written() as writer:
        fetched = prefetched(fetch, range(len(chosen)))
        for info, (data, visited) in zip(chosen, fetched, strict=True):
            table = worker_table(data.gpu, columns, timeline, data.ran, age, data.resources)
            missing += [(info.name, hole) for hole in holes(table.times, lo, hi, age)]
            uses.add_worker(timeline.times, data.prefixes, data.attribution)
            if visit:
                visit(info, visited, data.ran, table)
            rows_written += table.rows
            if not worker_files:
                continue
            if layout == "seed":
                header, lines = seed_header(columns), seed_lines(table, start)
            else:
                header, lines = tidy_header(columns), tidy_lines(info.name, table, start)
            writer.write(stage / names[info.name], header, lines)
        if progress:
            progress(len(chosen), len(chosen), "")
        for line in warnings_of(missing, age):
            client.warn(line)
        side = stage / tables
        side.mkdir(exist_ok=True)
        writer.write(side / "workers.csv", WORKERS_HEADER, map(csv_line, workers_rows(chosen)))
        store = client.store()
        jobs = fetch_jobs(client, lo, hi, chunk_ms, age, scope)
        writer.write(side / JOBS_CSV, JOBS_COLUMNS, map(csv_line, jobs_csv_rows(jobs, start)))
        names_of_jobs = JobNames.from_rows(jobs).names  # as jobs.csv names them
        writer.write(side / ACTIVITIES_CSV, ACTIVITY_COLUMNS, summary_lines(
            _activities(client, lo, hi, age, chunk_ms, scope, names_of_jobs), ACTIVITY_COLUMNS))
        writer.write(side / GPU_BY_PREFIX_CSV, GPU_BY_PREFIX_COLUMNS,
                     summary_lines(prefix_rows(uses.result(), names_of_jobs),
                                   GPU_BY_PREFIX_COLUMNS))
        warnings = client.warnings[warnings_before:]
        files = [names[w.name] for w in chosen]
        record = {
            "command": "export",
            "asked": dict(asked) if asked is not None else {
                "since": since, "until": until, "metrics": list(metrics or DEFAULT_NAMES),
                "step": step, "max_age": max_age, "layout": layout,
                "workers": list(workers) if workers else None, "chunk": chunk,
                "cluster": cluster},
            "since": format_rfc3339(start),
            "until": format_rfc3339(end),
            "since_unix": start / 1000,
            "until_unix": end / 1000,
            "step_seconds": step,
            "max_age_seconds": max_age,
            "layout": layout,
            "metrics": [c.name for c in columns],
            "units": {c.name: c.unit for c in columns},
            "prometheus": client.url,
            "store": store.kind,
            "store_note": store.note,
            "cluster": scope.cluster,
            "replica_labels": list(scope.replica_labels),
            "workers": [w.name for w in chosen],
            "simulated": any(w.simulated for w in chosen),
            "simulated_workers": [w.name for w in chosen if w.simulated],
            "files": files if worker_files else [],
            "summaries": list(SUMMARIES),
            "tables": tables,
            "rows": rows_written,
            "warnings": warnings,
            "versions": {"dask-metrics": __version__, "python": platform.python_version(),
                         "requests": requests.__version__,
                         "prometheus": store.version},
        }
        writer.wait()
        (stage / "export.json").write_text(json.dumps(record, indent=2) + "\n",
                                           encoding="utf-8")
    return ExportResult(target, [w.name for w in chosen], files, rows_written, warnings,
                        scope.cluster, store.note, chosen)


def _activities(client: PrometheusClient, start: int, end: int, age: int, chunk: int,
                scope: Scope, names: Mapping[str, str]) -> list[dict[str, Any]]:
    return activity_rows(increases(fetch_activities(client, start, end, age, chunk, scope),
                                   start), names)


def _job_names(client: PrometheusClient, start: int, end: int, chunk: int, age: int,
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
    return _activities(client, start, end, age, chunk_ms, scope,
                       _job_names(client, start, end, chunk_ms, age, scope))


def read_gpu_by_prefix(client: PrometheusClient, since: float, until: float, *,
                       cluster: str | None = None, any_cluster: bool = False,
                       replica_labels: Sequence[str] = REPLICA_LABELS,
                       max_age: float = DEFAULT_MAX_AGE, chunk: float = DEFAULT_CHUNK
                       ) -> list[dict[str, Any]]:
    """gpu_by_prefix.csv's rows for [since, until] (unix seconds), as dicts keyed by
    GPU_BY_PREFIX_COLUMNS (numbers as floats, None where unknown); the cluster as for
    ``find_workers``."""
    check_range(since, until)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    scope, chosen = find_workers(client, start, end, chunk_ms, None, cluster, replica_labels,
                                 any_cluster)
    timeline = fetch_cluster(client, start - age, end, chunk_ms, scope)
    executed = prefix_workers(client, start - age, end, chunk_ms, scope)
    uses = PrefixUses(age, seen_by(chosen))
    for info in chosen:
        if info.name in executed:  # the others add nothing
            data = fetch_worker(client, info.name, (), timeline, start, end, chunk_ms, None,
                                age, scope, True)
            uses.add_worker(timeline.times, data.prefixes, data.attribution)
    return prefix_rows(uses.result(), _job_names(client, start, end, chunk_ms, age, scope))


def _write_text(item: tuple[Path, str]) -> None:
    path, text = item
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def csv_text(header: Sequence[str], lines: Iterable[str]) -> str:
    """A CSV file's text: the header, then ``lines`` (CSV text without line ends)."""
    return "\n".join(chain([csv_line(header)], lines)) + "\n"


class _Writer:
    """CSV files written and synced in a thread while the next one is built: the write and
    its fsync wait on the disk without holding the GIL. One file in flight at a time, so
    memory holds at most two files' text."""

    def __init__(self) -> None:
        self._pending: _Background[tuple[Path, str], None] | None = None

    def write(self, path: Path, header: Sequence[str], lines: Iterable[str]) -> None:
        """A CSV file: the header, then ``lines`` (CSV text without line ends), in one write."""
        text = csv_text(header, lines)
        self.wait()
        self._pending = _Background(_write_text, (path, text))

    def wait(self) -> None:
        """Until the file in flight is on disk; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


@contextmanager
def _files_written() -> Iterator[_Writer]:
    """A _Writer whose file in flight is on disk (or failed) when the block is left, so that
    nothing writes into a staging folder being moved or removed. An error of the block is
    the one raised."""
    writer = _Writer()
    try:
        yield writer
    except BaseException:
        with suppress(Exception):
            writer.wait()
        raise
    writer.wait()


def previous_files(out: Path) -> set[str]:
    """The files an earlier export wrote into ``out``, as its export.json lists them:
    plain names, and the tables' in its ``tables`` subfolder (``tables/jobs.csv``); a name
    with any other path in it is not ours to remove."""
    try:
        record = json.loads((out / "export.json").read_text(encoding="utf-8"))
        tables = record.get("tables") or ""
        names = [*record.get("files", []), "export.json"]
        beside = [*record.get("summaries", []), "workers.csv", JOBS_CSV]
    except (OSError, ValueError, AttributeError, TypeError):
        return set()

    def plain(name: object) -> bool:
        return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name

    if tables and not plain(tables):
        return set()
    return {n for n in names if plain(n)} | {f"{tables}/{n}" if tables else n
                                             for n in beside if plain(n)}


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A hidden folder whose files are moved into ``out`` on success.

    A new ``out`` appears whole, by one rename of a folder made beside it; into an existing
    one (a mount point, a volume: renames cannot leave its file system) the folder is made
    inside it and each file is moved by its own atomic rename, export.json last, so that it
    never lists a file not yet in place; then the files of an earlier export (as its
    export.json listed them) that this one did not write are removed. Files that no
    export.json listed are left. On any failure the staging folder is removed and ``out``
    is untouched.
    """
    anchor = out.absolute() if out.is_dir() else out.absolute().parent
    while not anchor.exists():
        anchor = anchor.parent
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=anchor))
    try:
        yield stage
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            old = previous_files(out)
            written = _move_into(stage, out)
            for name in old - written:
                (out / name).unlink(missing_ok=True)
        else:
            stage.chmod(0o755)  # mkdtemp made it private
            os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _move_into(stage: Path, out: Path) -> set[str]:
    """Move the staged files into ``out``, each by an atomic rename, a subfolder's files
    into the same subfolder there, export.json last; returns their relative names."""
    written = set()
    for item in sorted(stage.iterdir(), key=lambda item: item.name == "export.json"):
        if item.is_dir():
            (out / item.name).mkdir(exist_ok=True)
            for inner in item.iterdir():
                os.replace(inner, out / item.name / inner.name)
                written.add(f"{item.name}/{inner.name}")
            item.rmdir()
        else:
            os.replace(item, out / item.name)
            written.add(item.name)
    stage.rmdir()
    return written
