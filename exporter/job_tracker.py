"""Which job and DAG every Dask task belongs to, and what each worker is running.

A pure state machine with no Dask import: the scheduler plugin (``dask_metrics.scheduler``)
feeds it Dask's hooks, the tests feed it by hand. Everything it holds is either live work
(bounded by what the scheduler itself holds) or bounded by a retention limit, so it can run
for months under millions of DAGs.

Words: a *job* groups DAGs (a client, a top-level span, or a Monitor-defined period); a
*DAG* is one graph submission (one ``update_graph``); a task is *wanted* when the client
asked for its result — a DAG is over when all its wanted tasks are over.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from dask_metrics.contract import IDLE, DagStatus

Key = Hashable


#: Task states in which Dask is working on a task (or about to): a DAG that touches a task
#: in one of these does not take it over from the DAG that submitted it first.
IN_FLIGHT = frozenset({"waiting", "queued", "processing", "no-worker"})


class JobMode(str, enum.Enum):
    CLIENT = "client"  # each client is a job
    SPAN = "span"  # each top-level Dask span is a job
    MANUAL = "manual"  # new_job() starts the next job


class SessionError(RuntimeError):
    """A monitor session request that does not fit the current session state."""


@dataclass(eq=False, slots=True)
class Job:
    id: int
    key: Hashable
    name: str
    next_dag: int = 0
    held: int = 0  # DAGs of this job still in memory (unfinished or retained)
    pinned: bool = False  # never evicted while pinned: its client is connected, or current


@dataclass(eq=False, slots=True)
class Dag:
    job: Job
    id: int
    client: str
    submitted: float
    pending: int = 0  # wanted tasks not over yet
    status: DagStatus = DagStatus.WAITING
    erred: bool = False
    started: float | None = None
    finished: float | None = None
    exported: bool = False  # seen by at least one scrape since it finished
    forgotten: bool = False  # dropped by retention: nothing may keep data for it any more
    # worker address -> [when its first task of the DAG began processing there, when its last
    # one stopped (None while one processes), the worker's label then]: the scheduler's own
    # times, finer than a scrape
    spans: dict[str, list] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job.id,
            "dag_id": self.id,
            "job_name": self.job.name,
            "client": self.client,
            "status": self.status.name.lower(),
            "submitted": self.submitted,
            "started": self.started,
            "finished": self.finished,
        }


@dataclass(slots=True)
class SessionJob:
    """The DAGs one job submitted while a monitor session ran: DAG ids grow with submission
    time within a job and a session is one stretch of time, so they are one range."""

    name: str
    first_dag: int
    last_dag: int


@dataclass(slots=True)
class MonitorSession:
    id: int
    start: float
    metrics: tuple[str, ...]
    stop: float | None = None
    max_jobs: int = 10_000  # jobs recorded; DAGs of further jobs are only counted
    jobs: dict[int, SessionJob] = field(default_factory=dict)  # by job id, first seen first
    unrecorded_dags: int = 0  # DAGs of the jobs beyond max_jobs
    owner: str | None = None  # who started it (a Monitor's user, host and client id)

    def record(self, dag: Dag) -> None:
        """``dag`` was submitted while this session ran."""
        job = dag.job
        seen = self.jobs.get(job.id)
        if seen is not None:
            seen.last_dag = dag.id
        elif len(self.jobs) < self.max_jobs:
            self.jobs[job.id] = SessionJob(job.name, dag.id, dag.id)
        else:
            self.unrecorded_dags += 1

    def to_dict(self) -> dict[str, object]:
        """``jobs``: the DAGs submitted while the session ran, per job in job-id order, as
        ``{"job_id", "job_name", "first_dag", "last_dag"}`` (every DAG id from first to
        last); ``unrecorded_dags``: DAGs of jobs beyond the recording limit, left out."""
        return {
            "id": self.id,
            "start": self.start,
            "stop": self.stop,
            "metrics": list(self.metrics),
            "jobs": [
                {"job_id": job_id, "job_name": j.name, "first_dag": j.first_dag,
                 "last_dag": j.last_dag}
                for job_id, j in sorted(self.jobs.items())
            ],
            "unrecorded_dags": self.unrecorded_dags,
            "owner": self.owner,
        }


def _by(session: MonitorSession) -> str:
    return f" (started by {session.owner})" if session.owner else ""


@dataclass(frozen=True, slots=True)
class TrackedWorker:
    label: str
    gpus: tuple[tuple[int, str], ...] = ()  # (index, uuid)


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


def clean_label(value: object, max_length: int) -> str:
    """A label value safe to export: printable characters only, at most ``max_length``."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    if len(text) > max_length:
        text = text[: max_length - 1] + "…"
    return text


class JobTracker:
    """Job/DAG numbering, per-worker task counts, DAG outcomes and monitor sessions."""

    def __init__(
        self,
        mode: JobMode | str = JobMode.CLIENT,
        *,
        max_finished_dags: int = 1000,
        max_unscraped_dags: int = 10_000,
        finished_dag_ttl: float = 300.0,
        max_jobs: int = 1000,
        max_sessions: int = 100,
        max_session_jobs: int = 10_000,
        label_max_length: int = 128,
        clock: Callable[[], float] = time.time,
        on_forget: Callable[[Dag | Job], None] | None = None,
    ) -> None:
        self.mode = JobMode(mode)
        self.max_finished_dags = max_finished_dags
        # finished DAGs no scrape has seen yet are kept beyond max_finished_dags, up to this
        self.max_unscraped_dags = max(max_unscraped_dags, max_finished_dags)
        self.unscraped_dropped = 0  # DAGs forgotten before any scrape saw them
        self.finished_dag_ttl = finished_dag_ttl
        self.max_jobs = max_jobs
        self.max_session_jobs = max_session_jobs
        self.label_max_length = label_max_length
        self._clock = clock
        # Told of every DAG and job the tracker forgets, so what is kept per DAG or job
        # elsewhere (the activity ledger) is forgotten with it.
        self._on_forget = on_forget

        self._jobs: dict[Hashable, Job] = {}  # by job key, oldest first
        self._job_ids = 0
        self._manual_job: Job | None = None
        self._unfinished: dict[Dag, None] = {}  # insertion-ordered: oldest first
        self._finished: deque[Dag] = deque()  # retained finished DAGs, oldest first
        self._owner: dict[Key, Dag] = {}  # every live task -> the DAG it runs for
        self._wanted: dict[Key, list[Dag]] = {}  # wanted task not over -> DAGs waiting on it
        self._processing: dict[Key, tuple[str, Dag]] = {}  # task -> (worker address, DAG)
        self._counts: dict[tuple[str, Dag], int] = {}  # (worker address, DAG) -> tasks
        self._workers: dict[str, TrackedWorker] = {}
        self.completed: dict[DagStatus, int] = {DagStatus.FINISHED: 0, DagStatus.ERRED: 0}

        self._session: MonitorSession | None = None
        self._session_ids = 0
        self._history: deque[MonitorSession] = deque(maxlen=max_sessions)

    # -- graph submissions -------------------------------------------------------------

    def submit(
        self,
        *,
        client: str,
        tasks: Iterable[Key],
        wanted: Iterable[Key],
        state_of: Callable[[Key], str | None],
        name: str = "",
        span: tuple[str, str] | None = None,
        submitter: Key | None = None,
    ) -> Dag:
        """Record one graph submission as a new DAG and return it.

        ``tasks``: every task the submission touched; ``wanted``: those whose results the
        client asked for; ``state_of``: a task's current Dask state. ``name`` names the
        client's job; ``span``: (id, name) of the top-level span, for span mode;
        ``submitter``: the task that submitted this graph from inside a worker, if any.
        """
        now = self._clock()
        parent = self._owner.get(submitter) if submitter is not None else None
        job = parent.job if parent is not None else self._job_for(client, name, span)
        dag = Dag(job, job.next_dag, clean_label(client, self.label_max_length), now)
        job.next_dag += 1
        job.held += 1

        owner = self._owner
        for key in tasks:
            if key not in owner or state_of(key) not in IN_FLIGHT:
                owner[key] = dag
        for key in wanted:
            state = state_of(key)
            if state == "memory":
                continue
            if state == "erred":
                dag.erred = True
                continue
            self._wanted.setdefault(key, []).append(dag)
            dag.pending += 1

        self._unfinished[dag] = None
        session = self._session
        if session is not None and session.stop is None:
            session.record(dag)
        if not dag.pending:
            self._finish(dag, now)
        return dag

    def _job_for(self, client: str, name: str, span: tuple[str, str] | None) -> Job:
        if self.mode is JobMode.MANUAL:
            job = self._manual_job or self.new_job()
            if not job.name:
                job.name = clean_label(name or client, self.label_max_length)
            return job
        if self.mode is JobMode.SPAN:
            span_id, span_name = span or ("", "default")
            key: Hashable = ("span", span_id)
            job_name, pinned = span_name, False
        else:
            key, job_name, pinned = ("client", client), name or client, True
        job = self._jobs.get(key)
        if job is None:
            job = self._new_job(key, job_name, pinned)
        elif pinned:
            job.pinned = True  # a client that reconnected under its id
        return job

    def _new_job(self, key: Hashable, name: str, pinned: bool) -> Job:
        self._evict_jobs(self.max_jobs - 1)  # make room first: the new job is idle too
        label = clean_label(name, self.label_max_length) if name else ""
        job = Job(self._job_ids, key, label, pinned=pinned)
        self._job_ids += 1
        self._jobs[key] = job
        return job

    def new_job(self, name: str | None = None) -> Job:
        """Manual mode: the next graph submissions belong to a new job."""
        if self.mode is not JobMode.MANUAL:
            raise ValueError(f"new_job needs job mode 'manual', not {self.mode.value!r}")
        if self._manual_job is not None:
            self._manual_job.pinned = False
        self._manual_job = self._new_job(("manual", self._job_ids), name or "", True)
        return self._manual_job

    def client_left(self, client: str) -> None:
        """A client disconnected: its job (client mode) may now be evicted when idle."""
        job = self._jobs.get(("client", client))
        if job is not None:
            job.pinned = False
            self._evict_jobs()

    # -- task transitions ----------------------------------------------------------------

    def transition(self, key: Key, start: str, finish: str, worker: str | None = None) -> None:
        """A task went from ``start`` to ``finish``; ``worker``: where it now processes."""
        if start == "processing":
            where = self._processing.pop(key, None)
            if where is not None:
                self._decrement(where)
        if finish == "processing":
            dag = self._owner.get(key)
            if dag is not None and worker is not None:
                where = (worker, dag)
                self._processing[key] = where
                self._increment(where)
                if dag.status is DagStatus.WAITING:
                    dag.status = DagStatus.RUNNING
                    dag.started = self._clock()
        elif finish == "memory":
            self._task_over(key, False)
        elif finish == "erred" or finish == "forgotten":
            self._task_over(key, True)
            if finish == "forgotten":
                self._owner.pop(key, None)

    def task_moved(self, key: Key, worker: str) -> None:
        """A processing task was stolen: it now processes on ``worker``."""
        where = self._processing.get(key)
        if where is None or where[0] == worker:
            return
        self._decrement(where)
        moved = (worker, where[1])
        self._processing[key] = moved
        self._increment(moved)

    def _increment(self, where: tuple[str, Dag]) -> None:
        count = self._counts.get(where, 0)
        self._counts[where] = count + 1
        if not count:  # the worker begins (or resumes) processing tasks of the DAG
            address, dag = where
            span = dag.spans.get(address)
            if span is None:
                info = self._workers.get(address)
                dag.spans[address] = [self._clock(), None,
                                      address if info is None else info.label]
            else:
                span[1] = None

    def _decrement(self, where: tuple[str, Dag]) -> None:
        left = self._counts[where] - 1
        if left:
            self._counts[where] = left
        else:
            del self._counts[where]
            span = where[1].spans.get(where[0])
            if span is not None:
                span[1] = self._clock()

    def _task_over(self, key: Key, failed: bool) -> None:
        dags = self._wanted.pop(key, None)
        if dags is None:
            return
        now = self._clock()
        for dag in dags:
            dag.pending -= 1
            if failed:
                dag.erred = True
            if not dag.pending:
                self._finish(dag, now)

    def _finish(self, dag: Dag, now: float) -> None:
        dag.status = DagStatus.ERRED if dag.erred else DagStatus.FINISHED
        dag.finished = now
        del self._unfinished[dag]
        self._finished.append(dag)
        self.completed[dag.status] += 1
        self.evict(now)

    # -- workers ---------------------------------------------------------------------------

    def add_worker(self, address: str, label: str, gpus: Iterable[tuple[int, str]] = ()) -> None:
        self._workers[address] = TrackedWorker(label, tuple(gpus))

    def remove_worker(self, address: str) -> None:
        """Forget a worker; any task still counted on it stops counting."""
        self._workers.pop(address, None)
        for key, where in list(self._processing.items()):
            if where[0] == address:
                del self._processing[key]
                self._decrement(where)

    # -- retention -------------------------------------------------------------------------

    def evict(self, now: float | None = None) -> int:
        """Forget finished DAGs beyond the retention count, and those that a scrape has
        exported and that finished more than the TTL ago. Returns how many were dropped.

        A DAG no scrape has seen yet is kept beyond the count, up to ``max_unscraped_dags``
        finished DAGs in all, so that every DAG's outcome reaches Prometheus however many
        finish between two scrapes; past that the oldest go unseen, counted in
        ``unscraped_dropped``. (A scrape exports every finished DAG: those it has not seen
        are the newest, at the end of the queue.)"""
        now = self._clock() if now is None else now
        finished, dropped = self._finished, 0
        while finished:
            oldest = finished[0]
            aged = oldest.exported and now - (oldest.finished or now) >= self.finished_dag_ttl
            limit = self.max_finished_dags if oldest.exported else self.max_unscraped_dags
            if len(finished) <= limit and not aged:
                break
            if not oldest.exported:
                self.unscraped_dropped += 1
            finished.popleft()
            oldest.forgotten = True
            oldest.job.held -= 1
            dropped += 1
            if self._on_forget is not None:
                self._on_forget(oldest)
        if dropped:
            self._evict_jobs()
        return dropped

    def _evict_jobs(self, limit: int | None = None) -> None:
        """Drop the oldest idle jobs (no DAG held, not pinned) beyond ``limit`` jobs."""
        excess = len(self._jobs) - (self.max_jobs if limit is None else limit)
        if excess <= 0:
            return
        idle = [k for k, job in self._jobs.items() if not job.held and not job.pinned]
        for key in idle[:excess]:
            job = self._jobs.pop(key)
            if self._on_forget is not None:
                self._on_forget(job)

    # -- monitor sessions ------------------------------------------------------------------

    @property
    def session(self) -> MonitorSession | None:
        """The running session, else the last one (None before the first)."""
        return self._session

    def start_session(self, metrics: Iterable[str] = (), owner: str | None = None
                      ) -> MonitorSession:
        if self._session is not None and self._session.stop is None:
            raise SessionError(f"monitor session {self._session.id}{_by(self._session)} is "
                               "already running")
        self._session = MonitorSession(
            self._session_ids, self._clock(), tuple(metrics), max_jobs=self.max_session_jobs,
            owner=owner,
        )
        self._session_ids += 1
        return self._session

    def stop_session(self) -> MonitorSession:
        session = self._session
        if session is None or session.stop is not None:
            raise SessionError("no monitor session is running")
        session.stop = self._clock()
        self._history.append(session)
        return session

    def sessions(self, since: int = -1) -> list[MonitorSession]:
        """Finished sessions with an id above ``since``, oldest first (bounded history)."""
        return [s for s in self._history if s.id > since]

    # -- queries ---------------------------------------------------------------------------

    def current(self) -> tuple[int, int]:
        """(job id, dag id) of the oldest unfinished DAG; (-1, -1) when idle."""
        for dag in self._unfinished:
            return dag.job.id, dag.id
        return IDLE, IDLE

    def owner(self, key: Key) -> Dag | None:
        """The DAG a live task runs for; None for a task submitted before the tracker."""
        return self._owner.get(key)

    def unfinished(self) -> list[Dag]:
        return list(self._unfinished)

    def dags(self) -> list[Dag]:
        """Every DAG held: retained finished ones, then unfinished ones (oldest first)."""
        return [*self._finished, *self._unfinished]

    def stats(self) -> dict[str, int]:
        """Sizes of the internal tables, to show that memory stays bounded."""
        return {
            "jobs": len(self._jobs),
            "unfinished_dags": len(self._unfinished),
            "finished_dags": len(self._finished),
            "tasks": len(self._owner),
            "wanted": len(self._wanted),
            "processing": len(self._processing),
            "worker_dag_pairs": len(self._counts),
            "workers": len(self._workers),
        }

    def snapshot(self) -> TrackerSnapshot:
        """What a scrape exports now; marks finished DAGs as exported (they may age out).

        Safe to call from another thread than the one feeding the tracker (an HTTP server
        of its own serving the default registry): it copies the containers, again if one
        changed size under the copy (a copy in C can still be interrupted when it triggers
        garbage collection), then reads only the copies.
        """
        now = self._clock()
        for _ in range(100):
            try:
                workers = dict(self._workers)
                counts = list(self._counts.items())
                finished, unfinished = list(self._finished), list(self._unfinished)
                spans = [(d, list(d.spans.items())) for d in (*finished, *unfinished)
                         if d.spans and not self._span_aged(d, now)]
                break
            except RuntimeError:  # "changed size during iteration": copy again
                continue
        else:
            raise RuntimeError("the tracker kept changing during 100 snapshot attempts")
        for dag in finished:
            dag.exported = True
            if dag.spans and self._span_aged(dag, now):
                dag.spans = {}  # its DAG finished a TTL ago: every scrape has had them
        session = self._session
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
            completed={status.name.lower(): n for status, n in self.completed.items()},
            unscraped=self.unscraped_dropped,
            dag_times=[(d.job.id, d.id, d.submitted, d.started, d.finished) for d in dags],
            worker_spans=_by_label(spans),
        )

    def _span_aged(self, dag: Dag, now: float) -> bool:
        """A finished DAG's worker spans are exported for ``finished_dag_ttl`` after it
        finished (several scrapes at any interval up to minutes), not as long as the DAG is
        retained: they are one series per worker that ran it."""
        return (dag.finished is not None and dag.exported
                and now - dag.finished >= self.finished_dag_ttl)


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

