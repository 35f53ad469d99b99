"""Jobs and DAGs of a time range, by name: the rows of ``jobs.csv`` and the phase labels of the
peaks table and the plots. Pure logic over fetched series (``fetch.fetch_jobs`` fetches them),
so export, peaks, plots, the report and ``Monitor`` share one way to name a job.

A DAG's row comes from the scheduler preload's ``dask_job_dag_info`` (its job's name and
client) and ``dask_job_dag_status`` (its outcome). Times are scrape times: ``first_seen`` is
the first scrape in the range that showed the DAG, ``last_seen`` the first one that showed
its final status (finished or erred), or its last scrape in the range when it had none yet:
the DAG's life at scrape resolution. A finished DAG stays in the series for a while
(``finished-dag-ttl``), so the later scrapes say nothing new and are not counted. A DAG
whose final status was already scraped before the range (the previous session's, kept) is
no row of this range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dask_metrics.collector.series import Series, id_key
from dask_metrics.collector.timespec import format_rfc3339
from dask_metrics.contract import CLIENT, DAG_ID, JOB_ID, JOB_NAME, DagStatus

FINAL = frozenset({DagStatus.FINISHED, DagStatus.ERRED})


@dataclass(frozen=True)
class JobRow:
    """One DAG of one job, as the scheduler preload exported it; times in ms."""

    job: str
    job_name: str
    dag: str
    client: str
    status: str  # waiting/running/finished/erred; "" when no status was scraped
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
        key = (s.labels.get(JOB_ID, ""), s.labels.get(DAG_ID, ""))
        slot = found.setdefault(key, {})
        for t, v in zip(s.times, s.values, strict=True):
            slot.setdefault(t, v)
    return {key: sorted(slot.items()) for key, slot in found.items()}


def job_rows(info: Iterable[Series], status: Iterable[Series], start: int, end: int
             ) -> list[JobRow]:
    """The DAGs seen in [start, end] (ms), by job then DAG id (pure).

    ``info``/``status``: raw dask_job_dag_info / dask_job_dag_status samples, fetched from a
    little before ``start`` so that a DAG that had already ended is recognised. Info series
    with the same job, DAG, name and client (a scheduler scraped at another address, HA
    replicas) are one DAG; a restarted scheduler numbering its jobs from 0 again gives rows
    with the same ids and other names or times.
    """
    times: dict[tuple[str, str, str, str], set[int]] = {}
    for s in info:
        key = (s.labels.get(JOB_ID, ""), s.labels.get(DAG_ID, ""),
               s.labels.get(JOB_NAME, ""), s.labels.get(CLIENT, ""))
        times.setdefault(key, set()).update(s.times)
    statuses = _statuses(status)
    rows = []
    for (job, dag, name, client), seen in times.items():
        inside = sorted(t for t in seen if start <= t <= end)
        if not inside:
            continue
        lo, hi = min(seen), inside[-1]
        mine = [(t, v) for t, v in statuses.get((job, dag), []) if lo <= t <= hi]
        ended = next((t for t, v in mine if v in FINAL), None)
        if ended is not None and ended < start:
            continue  # over before the range: a DAG of an earlier session, still kept
        last = ended if ended is not None else hi
        final = [v for t, v in mine if t <= last]
        rows.append(JobRow(job, name, dag, client, status_word(final[-1]) if final else "",
                           inside[0], last))
    rows.sort(key=lambda r: (id_key(r.job), id_key(r.dag), r.first_seen))
    return rows


def jobs_csv_rows(rows: Iterable[JobRow], start: int) -> list[list[str]]:
    """jobs.csv's rows (contract.JOBS_COLUMNS): times as seconds since ``start`` (the per-worker
    files' ``timestamp``), then as RFC 3339 (their ``time``)."""
    out = []
    for r in rows:
        out.append([r.job, r.job_name, r.dag, r.client, r.status,
                    _seconds(r.first_seen, start), _seconds(r.last_seen, start),
                    format_rfc3339(r.first_seen), format_rfc3339(r.last_seen)])
    return out


def _seconds(ms: int, start: int) -> str:
    return f"{(ms - start) / 1000:.3f}"


# ---- names of phases ----------------------------------------------------------------------


@dataclass(frozen=True)
class JobNames:
    """How to call a job and a DAG on a plot or in a table: by name, with the ids where a
    name alone would be ambiguous. Built from job rows, or from the columns of jobs.csv."""

    names: Mapping[str, str]  # job id -> job name ("" when it has none)
    dags: Mapping[str, int]  # job id -> how many DAGs it had
    repeated: frozenset[str]  # names that more than one job id carries

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str, str]]) -> JobNames:
        """From (job, job_name, dag) triples: jobs.csv's rows, or JobRows'."""
        names: dict[str, str] = {}
        dags: dict[str, set[str]] = {}
        for job, name, dag in pairs:
            names.setdefault(job, name)
            dags.setdefault(job, set()).add(dag)
        counts: dict[str, int] = {}
        for name in names.values():
            counts[name] = counts.get(name, 0) + 1
        return cls(names, {j: len(d) for j, d in dags.items()},
                   frozenset(n for n, c in counts.items() if n and c > 1))

    @classmethod
    def from_rows(cls, rows: Iterable[JobRow]) -> JobNames:
        return cls.of((r.job, r.job_name, r.dag) for r in rows)

    def job(self, job: str) -> str:
        """``etl``; ``etl (job 3)`` when another job has that name too; ``job 3`` without a
        name; "" for no job (idle)."""
        if not job:
            return ""
        name = self.names.get(job, "")
        if not name:
            return f"job {job}"
        return f"{name} (job {job})" if name in self.repeated else name

    def phase(self, job: str, dag: str) -> str:
        """``etl`` for a job of one DAG, ``etl · DAG 2`` for a job of several (or unknown)."""
        label = self.job(job)
        if not label or not dag or self.dags.get(job, 0) == 1:
            return label
        return f"{label} · DAG {dag}"


NO_NAMES = JobNames({}, {}, frozenset())
