"""The report's numbers gathered from the export's workers as it reads them (pure).

``Gatherer`` is the export's ``visit``: it takes per worker (``WorkerFold``, a piece of its
range at a time) the GPU use per job and DAG (``usage.gpu_usage``) and its peaks
(``fold.PeakFold``, what ``collector peaks`` folds) on the same fetched series, and folds
them into a ``tally.Tally`` as it goes by (in a pool of processes where one is given).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from typing import Any

from dask_metrics.collector.attribution.edges import EDGE_COUNTERS, edge_usage
from dask_metrics.collector.attribution.usage import (
    ENERGY,
    Row,
    Usage,
    UsageKey,
    attribute,
    gpu_usage,
    last_rows,
)
from dask_metrics.collector.charts.rows import Carried, carried, chart_rows
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.series import NOTHING_RAN, Series, Timeline, WorkerInfo
from dask_metrics.collector.model.tables import WorkerTable, gpu_series, joined
from dask_metrics.collector.peaks.fold import LATER, PeakFold
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.peaks.samples import window_keywords
from dask_metrics.collector.report.figures import (
    shared_devices,
)
from dask_metrics.collector.report.tally import DAG_SEPARATOR, Tally, WorkerFacts
from dask_metrics.collector.sources.worker_fetch import VisitPart
from dask_metrics.collector.work.pool import outcome, run_in, take_in_order


def dag_timeline(activity: Timeline) -> Timeline:
    """The worker's timeline with each state's job made "job/dag", so that ``gpu_peaks``'
    per-job grouping groups by DAG."""
    return Timeline(activity.times, [NOTHING_RAN if not job else (f"{job}{DAG_SEPARATOR}{dag}",
                                                                   dag)
                                     for job, dag in activity.states],
                    activity.exact, activity.memo)  # the same times: the same lookups


def job_peaks(dag_peaks: Iterable[Peak]) -> list[Peak]:
    """Per GPU and job, the largest of its DAGs' peaks (the first on a tie): what
    ``gpu_peaks(by_job=True)`` finds, without going over the samples again."""
    best: dict[tuple[str, str, str], Peak] = {}
    for p in dag_peaks:
        key = (p.gpu, p.uuid, p.job.split(DAG_SEPARATOR)[0])
        if key not in best or (p.peak_bytes, -p.time) > (best[key].peak_bytes, -best[key].time):
            best[key] = p
    return [replace(p, job=job) for (_, _, job), p in best.items()]


def fold_piece(fold: WorkerFold, info: WorkerInfo, series: Mapping[str, list[Series]],
               activity: Timeline, table: WorkerTable, part: VisitPart, chart: bool
               ) -> tuple[WorkerFold | WorkerFacts, WorkerTable | None]:
    """One piece of a worker's range folded into ``fold`` (pure, and a module function so
    that a process of the report's pool runs it): the fold, or after the last piece the
    worker's facts, and (``chart``) the piece's rows its chart draws (``chart_rows``)."""
    fold.add(series, activity, table, part)
    rows = None
    if chart:
        rows = chart_rows(table, fold.columns, fold.since, fold.until, fold.charted)
        fold.charted = carried(table, fold.charted)
    return (fold.result(info) if part.last else fold), rows


class WorkerFold:
    """One worker's WorkerFacts over the pieces of its range (export's VisitPart), in
    order, each piece's samples let go once added: its peaks folded (peaks.PeakFold), its
    GPU use summed (each GPU's last row carried to the next piece, whose first interval
    starts there), the intervals across the range's edges in its first and last piece."""

    def __init__(self, columns: Sequence[str], max_age: int, since: int, until: int,
                 window: tuple[int, int], worker: str) -> None:
        self.columns, self.max_age, self.since, self.until = tuple(columns), max_age, since, until
        self.peaks = PeakFold(worker, [True, False], max_age, since=since, until=until,
                              **window_keywords(window))
        self.usage: dict[UsageKey, Usage] = {}
        self.metered: set[tuple[str, str]] = set()
        self._rows: dict[tuple[str, str], Row] = {}
        self.charted: Carried = {}  # what its chart's rows carry from piece to piece

    def add(self, series: Mapping[str, list[Series]], activity: Timeline, table: WorkerTable,
            part: VisitPart) -> None:
        ran = activity if part.ran is None else part.ran
        self.peaks.add(series, [dag_timeline(ran), ran], *part.moments, margin=part.margin,
                       final=part.last)
        if ENERGY in self.columns:
            energy = self.columns.index(ENERGY)
            self.metered.update((g.gpu, g.uuid) for g in table.gpus if any(
                v is not None and v == v for v in g.columns[energy]))
        usage = gpu_usage(table, self.columns, self.max_age, activity, self._rows)
        if part.first or part.last:
            _add_edges(usage, self.columns, series, activity,
                       self.since if part.first else -LATER, self.until if part.last else LATER,
                       self.max_age)
        if not self.usage:
            self.usage = usage
        else:
            for key, u in usage.items():
                self.usage.setdefault(key, Usage()).add(u)
        if not part.last:
            self._rows.update(last_rows(table))

    def result(self, info: WorkerInfo) -> WorkerFacts:
        by_dag, whole = self.peaks.result()
        return WorkerFacts(info, self.usage, job_peaks(by_dag), by_dag, whole,
                           frozenset(self.metered))


def _add_edges(usage: dict[UsageKey, Usage], columns: Sequence[str],
               series: Mapping[str, list[Series]], activity: Timeline, since: int,
               until: int, max_age: int) -> None:
    """The parts of the scrape intervals across the range's edges (edges.edge_usage), to
    what the worker ran then."""
    metrics = {c.metric: c.name for c in select([n for n in EDGE_COUNTERS if n in columns])}
    for (gpu, uuid), samples in gpu_series({m: series.get(m, []) for m in metrics}).items():
        counters = {metrics[m]: found for m, found in samples.items()}
        for t, whole in edge_usage(counters, since, until, max_age):
            for (job, dag), part in attribute(whole, t, activity, max_age):
                if not job:
                    part.idle = 0.0
                usage.setdefault((job, dag, gpu, uuid), Usage()).add(part)


Then = Callable[[WorkerFacts, WorkerTable], None]
"""Told each worker's facts (with its table) once they are folded, in the export's order."""


@dataclass
class Gatherer:
    """The export's ``visit``: reduces each worker to its WorkerFacts (``fold_piece``) and
    folds them into ``tally`` (``expect`` first: which GPUs several workers see).

    With a ``pool`` (concurrent.futures' Executor) the workers are reduced there, up to
    ``ahead`` of them at once beside the export's reading, and folded in the export's order
    as they come back, so that the tally is the same as without: ``finish`` folds the last.
    A pool that cannot start a process leaves the rest to this one.
    The reduction is most of a report's own work, and a process of its own lets it run
    while this one reads and decodes the next workers.

    A range read in pieces is folded a piece at a time (``fold_piece``), each piece in the
    pool once the one before is back, and ``then`` is told the worker's table thinned to
    what its chart draws (``chart_rows``): what a worker holds between its pieces is its
    sums, best readings and chart rows, not its samples."""

    columns: Sequence[str]
    max_age: int  # ms
    since: int  # ms: the peaks' range (see peaks.gpu_peaks)
    until: int  # ms
    peak_window: int  # ms: of exporters that do not say theirs
    windows: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # fetch.peak_windows'
    tally: Tally | None = None  # set by ``expect``
    then: Then | None = None
    pool: Executor | None = None
    ahead: int = 2
    # each worker's last piece in the pool, and how its table is made of the piece's rows
    _pending: deque[tuple[Future[tuple[Any, WorkerTable | None]],
                          Callable[[WorkerTable | None], WorkerTable]]] = field(
        default_factory=deque)
    # a worker read in pieces: its fold (in the pool: the future of its last piece's), the
    # chart rows of its pieces so far
    _open: dict[str, tuple[WorkerFold | Future[tuple[Any, WorkerTable | None]],
                           list[WorkerTable | None]]] = field(default_factory=dict)

    def expect(self, workers: Sequence[WorkerInfo]) -> None:
        """The workers the export will visit: a GPU that several of them see is counted
        once."""
        self.tally = Tally(shared_devices((w.name, *g) for w in workers for g in w.gpus))

    def __call__(self, info: WorkerInfo, series: Mapping[str, list[Series]],
                 activity: Timeline, table: WorkerTable, part: VisitPart | None = None
                 ) -> None:
        if self.tally is None:  # shared GPUs would be counted twice, silently
            raise RuntimeError("Gatherer.expect(workers) must see the export's workers first")
        part = part or VisitPart((self.since, self.until + 1))
        whole = part.first and part.last
        fold, charts = self._open.pop(info.name, (None, []))
        if fold is None:
            fold = WorkerFold(self.columns, self.max_age, self.since, self.until,
                              self.windows.get(info.name, (self.peak_window, 0)), info.name)
        elif isinstance(fold, Future):  # the piece before, in the pool
            fold, rows = self._result(fold)
            charts.append(rows)
        job = self._run(fold, info, series, activity, table, part,
                        self.then is not None and not whole)
        if not part.last:
            self._open[info.name] = (job, charts)
            return
        self._pending.append((job, (lambda _: table) if whole else (
            lambda rows: joined(r for r in [*charts, rows] if r is not None))))
        take_in_order(self._pending, self.ahead, self._fold, "report")

    def _run(self, *args: Any) -> Future[tuple[Any, WorkerTable | None]]:
        """``fold_piece`` in the pool, or here (workpool.run_in)."""
        done, self.pool = run_in(self.pool, fold_piece, *args)
        return done

    def finish(self) -> None:
        """Fold the workers still in the pool."""
        take_in_order(self._pending, 0, self._fold, "report")

    @staticmethod
    def _result(done: Future[tuple[Any, WorkerTable | None]]) -> tuple[Any, Any]:
        return outcome(done, "report")

    def _fold(self, reduced: tuple[WorkerFacts, WorkerTable | None],
              table_of: Callable[[WorkerTable | None], WorkerTable]) -> None:
        """A worker's facts into the tally, and its table (made of its chart rows) to
        ``then``."""
        assert self.tally is not None
        facts, rows = reduced
        self.tally.add(facts)
        if self.then is not None:
            self.then(facts, table_of(rows))


# ---- numbers for JSON ------------------------------------------------------------------------
