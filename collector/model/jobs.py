"""Jobs and DAGs of a time range, by name: the rows of ``jobs.csv`` and the phase labels of the
peaks table and the plots. Pure logic over fetched series (``cluster.fetch_jobs`` fetches them),
so export, peaks, plots, the report and ``Monitor`` share one way to name a job.

A DAG's row comes from the scheduler preload's ``dask_job_dag_status`` (its outcome),
``dask_job_dag_info`` (its job's name and client) and its times: the scheduler's own,
``dask_job_dag_submitted_timestamp_seconds`` and ``..._finished_timestamp_seconds``, so a
DAG shorter than a scrape interval has its real edges and its outcome (read from the first
scrape after it ended, which may come after the range). ``first_seen``/``last_seen`` are
those edges within the range. From an older preload without the times, they are scrape
times: the first scrape in the range that showed the DAG, and the first one that showed its
final status (finished or erred), or its last scrape in the range when it had none yet. A
finished DAG stays in the series for a while (``finished-dag-ttl``). A DAG that ended
before the range (the previous session's, kept) is no row of this range.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dask_metrics.collector.model.counters import increase
from dask_metrics.collector.model.lifetimes import clock, job_key, job_order, life, plain
from dask_metrics.collector.model.series import Series, id_key
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.contract import (
    CLIENT,
    DAG_FINISHED,
    DAG_ID,
    DAG_STARTED,
    DAG_SUBMITTED,
    JOB_NAME,
    DagStatus,
)

FINAL = frozenset({DagStatus.FINISHED, DagStatus.ERRED})
UNDECIDED = frozenset({"waiting", "running"})  # the words of a DAG without an outcome yet
DAG_TIMES = (DAG_SUBMITTED.name, DAG_STARTED.name, DAG_FINISHED.name)


@dataclass(frozen=True)
class JobRow:
    """One DAG of one job, as the scheduler preload exported it; times in ms. ``job``: the
    job's key (its id within its scheduler's life, lifetimes.job_key)."""

    job: str
    job_name: str
    dag: str
    client: str
    status: str  # waiting/running/finished/erred
    first_seen: int
    last_seen: int


def status_word(value: float) -> str:
    """DagStatus' name in lower case; an unknown number as itself."""
    try:
        return DagStatus(int(value)).name.lower()
    except ValueError:
        return str(int(value))


def _statuses(status: Iterable[Series]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """{(job, dag): [(time, status)] in time order}; replicas and restarts already merged
    into one list per DAG (the scheduler's series differ by their scrape labels only)."""
    found: dict[tuple[str, str], dict[int, float]] = {}
    for s in status:
        key = (job_key(s.labels), s.labels.get(DAG_ID, ""))
        slot = found.setdefault(key, {})
        for t, v in zip(s.times, s.values, strict=True):
            slot.setdefault(t, v)
    return {key: sorted(slot.items()) for key, slot in found.items()}


def job_rows(info: Iterable[Mapping[str, str]], status: Iterable[Series], start: int,
             end: int, times: Mapping[str, Iterable[Series]] | None = None,
             scrapes: Sequence[int] = ()) -> list[JobRow]:
    """The DAGs of [start, end] (ms), by job then DAG id (pure).

    ``status``: raw dask_job_dag_status samples, fetched from a little before ``start`` (to
    recognise a DAG that had already ended) to a little after ``end`` (the outcome of one
    that ended just before it). ``times``: {metric: series} of the DAG timestamp gauges
    (``DAG_TIMES``), where the preload exports them. ``info``: the label sets of
    dask_job_dag_info, for the names. Series of one DAG from several scheduler addresses or
    HA replicas are one DAG. A restarted scheduler numbers its jobs from 0 again: its
    ``scheduler_start`` label keeps them apart (lifetimes.job_key); from a preload older than
    the label, such ids' samples are one row, with their names joined by " / ".

    ``scrapes``: the scheduler's scrape times (any life), read as far past ``end`` as the
    statuses. A DAG without an outcome that a later scrape no longer showed is ``unknown``,
    last seen at its last sample: its scheduler restarted (or forgot it) before any scrape
    saw it end (as an outcome is, this is learnt from the first scrape after, even past the
    range's end).
    """
    named: dict[tuple[str, str], dict[tuple[str, str], None]] = {}
    for labels in info:
        key = (job_key(labels), labels.get(DAG_ID, ""))
        named.setdefault(key, {})[labels.get(JOB_NAME, ""), labels.get(CLIENT, "")] = None
    edges = _edges(times or {})
    rows = []
    for (job, dag), samples in _statuses(status).items():
        found = (_timed(samples, edges[job, dag], start, end) if (job, dag) in edges
                 else _scraped(samples, start, end))
        if found is None:
            continue
        word, first, last = found
        seen = samples[-1][0]
        if word in UNDECIDED and bisect_right(scrapes, seen) < len(scrapes):
            if seen < start:
                continue  # last seen before the range, gone by a scrape in it
            word, last = "unknown", min(last, seen)
        pairs = sorted(named.get((job, dag), {}))
        rows.append(JobRow(job, " / ".join(dict.fromkeys(n for n, _ in pairs)), dag,
                           " / ".join(dict.fromkeys(c for _, c in pairs)), word, first, last))
    rows.sort(key=lambda r: (job_order(r.job), id_key(r.dag)))
    return rows


Edges = tuple[int, int | None, int | None]
"""A DAG's (submitted, started, finished) in ms, by the scheduler's clock."""


def _edges(times: Mapping[str, Iterable[Series]]) -> dict[tuple[str, str], Edges]:
    """Each DAG's edges from its timestamp gauges (the last value of each series)."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for metric, series in times.items():
        for s in series:
            if s.values and s.values[-1] > 0:
                key = (job_key(s.labels), s.labels.get(DAG_ID, ""))
                found.setdefault(key, {})[metric] = round(s.values[-1] * 1000)
    return {key: (t[DAG_SUBMITTED.name], t.get(DAG_STARTED.name), t.get(DAG_FINISHED.name))
            for key, t in found.items() if DAG_SUBMITTED.name in t}


def _timed(samples: list[tuple[int, float]], edges: Edges, start: int, end: int
           ) -> tuple[str, int, int] | None:
    """(status, first, last) of a DAG whose edges the scheduler exported; None when it does
    not overlap [start, end]."""
    submitted, started, finished = edges
    if submitted > end or (finished is not None and finished < start):
        return None
    if finished is not None and finished <= end:
        final = next((v for t, v in samples if v in FINAL and t >= finished - 1000), None)
        word = status_word(final) if final is not None else "unknown"
    else:  # still going at the end: what the scheduler said last, else its own times
        before = [v for t, v in samples if t <= end]
        word = (status_word(before[-1]) if before
                else "running" if started is not None and started <= end else "waiting")
    return word, max(submitted, start), min(finished if finished is not None else end, end)


def _scraped(samples: list[tuple[int, float]], start: int, end: int
             ) -> tuple[str, int, int] | None:
    """(status, first, last) at scrape resolution (a preload without the DAG times)."""
    inside = [t for t, _ in samples if start <= t <= end]
    if not inside:
        return None
    ended = next((t for t, v in samples if v in FINAL and t <= end), None)
    if ended is not None and ended < start:
        return None  # over before the range: a DAG of an earlier session, still kept
    last = ended if ended is not None else inside[-1]
    final = [v for t, v in samples if t <= last][-1]
    return status_word(final), inside[0], last


def unscraped_note(counters: Iterable[Series], start: int, end: int) -> str:
    """A warning when dask_job_dags_unscraped_total grew from the last sample before
    ``start`` to the first at or after ``end`` (a restart's reset counts from 0), else ""."""
    lost = 0.0
    for s in counters:
        cut = bisect_left(s.times, end) + 1  # through the first sample at or after end
        lost += increase(s.times[:cut], s.values[:cut], start)
    if lost <= 0:
        return ""
    return (f"{lost:.0f} DAG(s) finished and were forgotten by the scheduler before any "
            "scrape saw them (more than its max-unscraped-dags between two scrapes): they are "
            "in no job table; raise max-unscraped-dags or scrape the scheduler more often")


def jobs_csv_rows(rows: Iterable[JobRow], start: int) -> list[list[str]]:
    """jobs.csv's rows (contract.JOBS_COLUMNS): times as seconds since ``start`` (the per-worker
    files' ``timestamp``), then as RFC 3339 (their ``time``)."""
    out = []
    for r in rows:
        out.append([plain(r.job), r.job_name, r.dag, r.client, r.status,
                    _offset_text(r.first_seen, start), _offset_text(r.last_seen, start),
                    format_rfc3339(r.first_seen), format_rfc3339(r.last_seen), life(r.job)])
    return out


def _offset_text(ms: int, start: int) -> str:
    """Seconds since ``start`` (ms), as the CSV files write a timestamp."""
    return f"{(ms - start) / 1000:.3f}"


# ---- names of phases ----------------------------------------------------------------------


@dataclass(frozen=True)
class JobNames:
    """How to call a job and a DAG on a plot or in a table: by name, with the ids where a
    name alone would be ambiguous. Built from job rows, or from the columns of jobs.csv."""

    names: Mapping[str, str]  # job key -> job name ("" when it has none)
    dags: Mapping[str, int]  # job key -> how many DAGs it had
    repeated: frozenset[str]  # names that more than one job key carries
    twins: frozenset[str] = frozenset()  # keys whose name and id another scheduler life has

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str, str]]) -> JobNames:
        """From (job key, job_name, dag) triples: JobRows', or jobs.csv's rows (their job
        qualified by their scheduler_start)."""
        names: dict[str, str] = {}
        dags: dict[str, set[str]] = {}
        for job, name, dag in pairs:
            names.setdefault(job, name)
            dags.setdefault(job, set()).add(dag)
        counts: dict[str, int] = {}
        for name in names.values():
            counts[name] = counts.get(name, 0) + 1
        seen: dict[tuple[str, str], int] = {}
        for job, name in names.items():
            seen[name, plain(job)] = seen.get((name, plain(job)), 0) + 1
        return cls(names, {j: len(d) for j, d in dags.items()},
                   frozenset(n for n, c in counts.items() if n and c > 1),
                   frozenset(j for j, n in names.items() if seen[n, plain(j)] > 1))

    @classmethod
    def from_rows(cls, rows: Iterable[JobRow]) -> JobNames:
        return cls.of((r.job, r.job_name, r.dag) for r in rows)

    def job(self, job: str) -> str:
        """``etl``; ``etl (job 3)`` when another job has that name too; ``job 3`` without a
        name; "" for no job (idle). A job whose name and id a restarted scheduler gave
        another job too: ``etl (job 0, scheduler of 07:12:03)``."""
        if not job:
            return ""
        name, ident = self.names.get(job, ""), plain(job)
        label = (f"{name} (job {ident})" if name in self.repeated else name) if name \
            else f"job {ident}"
        if job in self.twins:
            of = f"scheduler of {clock(life(job))}"
            label = f"{label[:-1]}, {of})" if label.endswith(")") else f"{label} ({of})"
        return label

    def phase(self, job: str, dag: str) -> str:
        """``etl`` for a job of one DAG, ``etl · DAG 2`` for a job of several (or unknown)."""
        label = self.job(job)
        if not label or not dag or self.dags.get(job, 0) == 1:
            return label
        return f"{label} · DAG {dag}"


NO_NAMES = JobNames({}, {}, frozenset())
