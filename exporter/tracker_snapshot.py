"""What one scrape exports of the job tracker, and how it is copied out of the tracker's
live tables: the exporter may run on another thread than the one feeding the tracker, so
it must only ever read copies."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from dask_metrics.contract import IDLE, DagStatus
from dask_metrics.exporter.job_model import Dag, TrackedWorker
from dask_metrics.exporter.monitor_session import SessionLog


@dataclass(frozen=True)
class TrackerSnapshot:
    """Everything one scrape exports, copied so the exporter never iterates live state."""

    current_job: int
    current_dag: int
    worker_tasks: list[tuple[str, int, int, int]]  # worker label, job id, dag id, tasks
    dags: list[tuple[int, int, str, str, int]]  # job id, dag id, job name, client, status
    gpus: list[tuple[str, str, int, str]]  # worker label, address, gpu index, uuid
    session: tuple[float, float] | None  # start, stop (0 while running)
    completed: dict[str, int] = field(default_factory=dict)  # final status -> DAG count
    unscraped: int = 0  # finished DAGs forgotten before any scrape saw them
    # job id, dag id, submitted, first task started, finished (unix seconds; None: not yet)
    dag_times: list[tuple[int, int, float, float | None, float | None]] = field(
        default_factory=list)
    # worker label, job id, dag id, its first task there began, its last one stopped (None:
    # one processes now)
    worker_spans: list[tuple[str, int, int, float, float | None]] = field(default_factory=list)


def take_snapshot(
    now: float,
    finished_dag_ttl: float,
    *,
    worker_table: Mapping[str, TrackedWorker],
    count_table: Mapping[tuple[str, Dag], int],
    finished_dags: Collection[Dag],
    unfinished_dags: Collection[Dag],
    sessions: SessionLog,
    completed: Mapping[DagStatus, int],
    unscraped: int,
) -> TrackerSnapshot:
    """A snapshot of the tracker's live tables, taken as ``JobTracker.snapshot`` says."""
    for _ in range(100):
        try:
            workers = dict(worker_table)
            counts = list(count_table.items())
            finished, unfinished = list(finished_dags), list(unfinished_dags)
            spans = [(d, list(d.spans.items())) for d in (*finished, *unfinished)
                     if d.spans and not _span_aged(d, now, finished_dag_ttl)]
            break
        except RuntimeError:  # "changed size during iteration": copy again
            continue
    else:
        raise RuntimeError("the tracker kept changing during 100 snapshot attempts")
    for dag in finished:
        dag.exported = True
        if dag.spans and _span_aged(dag, now, finished_dag_ttl):
            dag.spans = {}  # its DAG finished a TTL ago: every scrape has had them
    session = sessions.current
    oldest = unfinished[0] if unfinished else None
    dags = finished + unfinished

    def label(address: str) -> str:
        info = workers.get(address)
        return info.label if info is not None else address

    return TrackerSnapshot(
        current_job=oldest.job.id if oldest is not None else IDLE,
        current_dag=oldest.id if oldest is not None else IDLE,
        worker_tasks=[(label(a), d.job.id, d.id, n) for (a, d), n in counts],
        dags=[(d.job.id, d.id, d.job.name, d.client, int(d.status)) for d in dags],
        gpus=[
            (info.label, address, index, uuid)
            for address, info in workers.items()
            for index, uuid in info.gpus
        ],
        session=None if session is None else (session.start, session.stop or 0.0),
        completed={status.name.lower(): n for status, n in completed.items()},
        unscraped=unscraped,
        dag_times=[(d.job.id, d.id, d.submitted, d.started, d.finished) for d in dags],
        worker_spans=_by_label(spans),
    )


def _span_aged(dag: Dag, now: float, finished_dag_ttl: float) -> bool:
    """A finished DAG's worker spans are exported for ``finished_dag_ttl`` after it
    finished (several scrapes at any interval up to minutes), not as long as the DAG is
    retained: they are one series per worker that ran it."""
    return (dag.finished is not None and dag.exported
            and now - dag.finished >= finished_dag_ttl)


def _by_label(spans: Iterable[tuple[Dag, list[tuple[str, list]]]]
              ) -> list[tuple[str, int, int, float, float | None]]:
    """One span per worker label and DAG: a worker that came back on another address under
    the same name has two, which one series must hold (the first start; open while either
    is, else the last end). The label is the worker's when it began the DAG: one that left
    is no longer known by its address."""
    out: dict[tuple[str, Dag], tuple[float, float | None]] = {}
    for dag, items in spans:
        for _, (begin, end, name) in items:
            key = (name, dag)
            if key in out:
                first, last = out[key]
                end = None if end is None or last is None else max(end, last)
                begin = min(begin, first)
            out[key] = (begin, end)
    return [(name, dag.job.id, dag.id, begin, end) for (name, dag), (begin, end) in out.items()]

