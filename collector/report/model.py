"""The session report as data (pure): every number on the page, in report.json's shape.

``Gatherer`` is the export's ``visit``: it takes per worker (``WorkerFold``, a piece of its
range at a time) the GPU use per job and DAG (``usage.gpu_usage``) and its peaks
(``fold.PeakFold``, what ``collector peaks`` folds) on the same fetched series, and folds
them into a ``tally.Tally`` as it goes by (in a pool of processes where one is given).
``build`` turns that, the export's jobs.csv rows and the optional "where the time went"
rows into the report's dict.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dask_metrics.collector.attribution.edges import EDGE_COUNTERS, edge_usage
from dask_metrics.collector.attribution.usage import (
    ENERGY,
    IDLE_PERCENT,
    Row,
    Usage,
    UsageKey,
    attribute,
    gpu_usage,
    last_rows,
)
from dask_metrics.collector.charts.rows import Carried, carried, chart_rows
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.lifetimes import clock, job_order, life, plain, qualify
from dask_metrics.collector.model.series import NOTHING_RAN, Series, Timeline, WorkerInfo, id_key
from dask_metrics.collector.model.tables import WorkerTable, gpu_series, joined
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.peaks.fold import LATER, PeakFold
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.peaks.samples import window_keywords
from dask_metrics.collector.report.advice import GpuModel, recommendations
from dask_metrics.collector.report.figures import (
    PEAK_KEYS,
    UseSum,
    device_key,
    num,
    shared_devices,
)
from dask_metrics.collector.report.headline import headline, title_words
from dask_metrics.collector.report.tally import DAG_SEPARATOR, Tally, WorkerFacts, listed
from dask_metrics.collector.sources.worker_fetch import VisitPart
from dask_metrics.collector.work.pool import outcome, run_in, take_in_order

REPORT_VERSION = 4  # 3: a title in words, the headline figures, a baseline; 4: GPUs listed


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


def _status(statuses: Iterable[str]) -> str:
    """A job's outcome from its DAGs': erred if one erred, finished if all did."""
    found = [s for s in statuses if s] or ["unknown"]
    if "erred" in found:
        return "erred"
    if all(s == "finished" for s in found):
        return "finished"
    return next(s for s in found if s != "finished")


def _seconds_of(text: str | None) -> float | None:
    """Unix seconds of an RFC 3339 time (jobs.csv's ``*_time`` columns), None if not one."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _wall(rows: Sequence[Mapping[str, str]], use: Mapping[str, Any]) -> dict[str, Any]:
    """Wall time: from jobs.csv's first and last seen where the export has them (the
    scheduler's view), else the first and last GPU interval attributed to it."""
    firsts = [s for r in rows if (s := _seconds_of(r.get("first_seen_time"))) is not None]
    lasts = [s for r in rows if (s := _seconds_of(r.get("last_seen_time"))) is not None]
    if firsts and lasts:
        begin, end, source = min(firsts), max(lasts), "jobs.csv (scheduler)"
    elif use["seen_first"] and use["seen_last"]:
        begin, end = _seconds_of(use["seen_first"]), _seconds_of(use["seen_last"])
        source = "GPU samples of the workers that ran it"
    else:
        return {"wall_seconds": None, "start": None, "end": None, "wall_source": None}
    assert begin is not None and end is not None
    return {"wall_seconds": num(end - begin), "start": format_rfc3339(round(begin * 1000)),
            "end": format_rfc3339(round(end * 1000)), "wall_source": source}


# ---- the report ------------------------------------------------------------------------------


def _gpus(info: WorkerInfo, capacity: Mapping[tuple[str, str], float | None],
          labels: Mapping[tuple[str, str, str], Mapping[str, str]]) -> list[dict[str, Any]]:
    out = []
    for gpu, uuid in info.gpus:
        found = labels.get((info.name, gpu, uuid), {})
        out.append({"gpu": gpu, "uuid": uuid, "model": found.get("name") or None,
                    "capacity_bytes": num(capacity.get((gpu, uuid))),
                    "simulated": found.get("simulated") == "true"})
    return out


def build(session: Mapping[str, Any], facts: Tally | Sequence[WorkerFacts],
          gpu_labels: Mapping[tuple[str, str, str], Mapping[str, str]],
          jobs_rows: Sequence[Mapping[str, str]] | None, models: Sequence[GpuModel],
          headroom: float, where: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """report.json's dict. ``session``: cluster, range and provenance; ``facts``: every
    worker's, folded (a Tally) or not; ``gpu_labels``: dask_gpu_info's labels by (worker,
    gpu, uuid); ``jobs_rows``: jobs.csv's rows, None where the export has none;
    ``where``: the export's activities.csv and gpu_by_prefix.csv rows (each None where it
    wrote none; ``build._where``), with ``rows_in_export``: how many each file has."""
    tally = facts if isinstance(facts, Tally) else Tally.of(facts)
    workers = [{"worker": info.name, "hosts": info.hosts, "addresses": info.addresses,
                "gpus": _gpus(info, capacity, gpu_labels)} for info, capacity in tally.workers]
    seen_by: dict[str, list[str]] = {}
    devices: dict[str, dict[str, Any]] = {}  # one GPU is one GPU, however many workers see it
    for w in workers:
        for g in w["gpus"]:
            key = device_key(w["worker"], g["gpu"], g["uuid"])
            devices.setdefault(key, g)
            seen_by.setdefault(key, []).append(w["worker"])
    gpus = list(devices.values())
    simulated = sum(g["simulated"] for g in gpus)
    highest = tally.gpus.highest
    body: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "session": {**session, "workers": workers, "worker_count": len(workers),
                    "gpu_count": len(gpus),
                    "shared_gpus": [{"uuid": d, "workers": ws} for d, ws in seen_by.items()
                                    if len(ws) > 1] or None,
                    "simulated": "all" if gpus and simulated == len(gpus)
                    else "some" if simulated else "none",
                    "jobs_source": "jobs.csv" if jobs_rows is not None else None,
                    "rmm": {"workers_with_pool": sorted(tally.pooled),
                            "workers_tracked": sorted(tally.tracked)} if tally.pooled else None,
                    "usage": tally.use.entry(),
                    "peak": None if highest is None else {k: highest[k] for k in PEAK_KEYS}},
        "rules": {"headroom": headroom, "idle_below_percent": IDLE_PERCENT,
                  "gpus_listed": tally.most,
                  "attribution": "a GPU's interval between two samples belongs to what its "
                  "worker ran at the later sample; intervals longer than max_age are gaps; "
                  "the intervals across the range's start and end count with the share of "
                  "their time inside it"},
        "jobs": _jobs(tally, jobs_rows),
        "where_the_time_went": dict(where or {"activities": None, "gpu_by_prefix": None,
                                              "rows_in_export": {}}),
        "plots": [],
    }
    body["recommendations"] = recommendations(body, tally.gpus, models, headroom)
    body["session"]["title"] = title_words(body)
    body["headline"] = headline(body)
    body["baseline"] = None
    return body


def _label(key: str, keys: Sequence[str]) -> str:
    """How the report calls a job's id: ``3``, or ``3 (scheduler of 07:12:03)`` where a
    restarted scheduler numbered another job of ``keys`` 3 too."""
    ident = plain(key)
    if not any(k != key and plain(k) == ident for k in keys):
        return ident
    return f"{ident} (scheduler of {clock(life(key))})"


def _jobs(tally: Tally, rows: Sequence[Mapping[str, str]] | None) -> list[dict[str, Any]]:
    """Per job by id (each DAG within it): its use, its listed GPUs and peaks, its outcome
    and wall time from jobs.csv's ``rows``."""
    by_dag_rows = {(qualify(r.get("job", ""), r.get("scheduler_start", "")), r.get("dag", "")): r
                   for r in rows or ()}
    dags: dict[str, list[str]] = {}
    for job, dag in sorted({*tally.dags, *by_dag_rows},
                           key=lambda d: (job_order(d[0]), id_key(d[1]))):
        dags.setdefault(job, []).append(dag)
    keys = list(dags)
    empty = UseSum().entry()
    out = []
    for job, mine in dags.items():
        job_rows = [by_dag_rows[(job, d)] for d in mine if (job, d) in by_dag_rows]
        found = tally.jobs.get(job)
        if found is not None:
            found.settle()
        use = found.use.entry() if found is not None else empty
        peaks, peak = listed(found.peaks) if found is not None else ([], None)
        listed_gpus = list(found.per_gpu) if found is not None else []
        entry = {"job": plain(job), "scheduler_start": life(job) or None,
                 "job_label": _label(job, keys),
                 "job_name": next((r.get("job_name") for r in job_rows
                                   if r.get("job_name")), None),
                 "status": _status(r.get("status", "") for r in job_rows) if job_rows
                 else "unknown", **_wall(job_rows, use), **use,
                 "peaks": peaks, "peaks_omitted": found.peaks.omitted if found else 0,
                 "per_gpu": listed_gpus,
                 "per_gpu_omitted": found.per_gpu.omitted if found else 0,
                 "idle_gpus": found.idle_gpus if found else 0,
                 "peak": peak,
                 "peak_held_bytes": num(found.held) if found and found.held_known else None,
                 "dags": []}
        for d in mine:
            row = by_dag_rows.get((job, d))
            dag = tally.dags.get((job, d))
            dag_use = dag.use.entry() if dag is not None else empty
            peaks, peak = listed(dag.peaks) if dag is not None else ([], None)
            entry["dags"].append({
                "dag": d, "status": (row or {}).get("status") or "unknown",
                **_wall([row] if row else [], dag_use), **dag_use, "peaks": peaks,
                "peaks_omitted": dag.peaks.omitted if dag is not None else 0, "peak": peak})
        out.append(entry)
    return out
