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

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable

from dask_metrics.contract import IDLE, DagStatus
from dask_metrics.exporter.job_model import Dag, Job, JobMode, TrackedWorker
from dask_metrics.exporter.job_registry import JobRegistry
from dask_metrics.exporter.label_values import clean_label
from dask_metrics.exporter.monitor_session import MonitorSession, SessionLog
from dask_metrics.exporter.tracker_snapshot import TrackerSnapshot, take_snapshot

Key = Hashable

#: Task states in which Dask is working on a task (or about to): a DAG that touches a task
#: in one of these does not take it over from the DAG that submitted it first.
IN_FLIGHT = frozenset({"waiting", "queued", "processing", "no-worker"})


class JobTracker:
    """Job/DAG numbering, per-worker task counts, DAG outcomes and monitor sessions."""

    def __init__(
        self,
        mode: JobMode | str = JobMode.CLIENT,
        *,
        max_finished_dags: int = 1000,
        max_unscraped_dags: int = 10_000,
        max_finished_series: int | None = None,
        finished_dag_ttl: float = 300.0,
        max_jobs: int = 1000,
        max_sessions: int = 100,
        max_session_jobs: int = 10_000,
        label_max_length: int = 128,
        clock: Callable[[], float] = time.time,
        on_forget: Callable[[Dag | Job], None] | None = None,
        series_elsewhere: Callable[[Dag], int] | None = None,
    ) -> None:
        self.max_finished_dags = max_finished_dags
        # scraped finished DAGs go, oldest first, while the finished DAGs' series number more
        # (None: no such bound); ``series_elsewhere``: what else keeps series per DAG (the
        # activity ledger's counters)
        self.max_finished_series = max_finished_series
        self._series_elsewhere = series_elsewhere
        self._scraped = 0  # the scraped finished DAGs (at the head of _finished) counted in
        self._scraped_series = 0  # the sum of their series
        # finished DAGs no scrape has seen yet are kept beyond max_finished_dags, up to this
        self.max_unscraped_dags = max(max_unscraped_dags, max_finished_dags)
        self.unscraped_dropped = 0  # DAGs forgotten before any scrape saw them
        self.finished_dag_ttl = finished_dag_ttl
        self.label_max_length = label_max_length
        self._clock = clock
        # Told of every DAG and job the tracker forgets, so what is kept per DAG or job
        # elsewhere (the activity ledger) is forgotten with it.
        self._on_forget = on_forget

        self._jobs = JobRegistry(JobMode(mode), max_jobs=max_jobs,
                                 label_max_length=label_max_length, on_forget=on_forget)
        self._unfinished: dict[Dag, None] = {}  # insertion-ordered: oldest first
        self._finished: deque[Dag] = deque()  # retained finished DAGs, oldest first
        self._owner: dict[Key, Dag] = {}  # every live task -> the DAG it runs for
        self._wanted: dict[Key, list[Dag]] = {}  # wanted task not over -> DAGs waiting on it
        self._processing: dict[Key, tuple[str, Dag]] = {}  # task -> (worker address, DAG)
        self._counts: dict[tuple[str, Dag], int] = {}  # (worker address, DAG) -> tasks
        self._workers: dict[str, TrackedWorker] = {}
        self.completed: dict[DagStatus, int] = {DagStatus.FINISHED: 0, DagStatus.ERRED: 0}
        self._sessions = SessionLog(clock, max_sessions=max_sessions,
                                    max_session_jobs=max_session_jobs)

    @property
    def mode(self) -> JobMode:
        """What a job is: a client, a top-level span, or what ``new_job`` starts."""
        return self._jobs.mode

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
        job = parent.job if parent is not None else self._jobs.job_for(client, name, span)
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
        self._sessions.record(dag)
        if not dag.pending:
            self._finish(dag, now)
        return dag

    def new_job(self, name: str | None = None) -> Job:
        """Manual mode: the next graph submissions belong to a new job."""
        return self._jobs.new_job(name)

    def client_left(self, client: str) -> None:
        """A client disconnected: its job (client mode) may now be evicted when idle."""
        self._jobs.client_left(client)

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
        budget = self.max_finished_series
        if budget is not None:
            self._count_scraped()
        while finished:
            oldest = finished[0]
            aged = oldest.exported and now - (oldest.finished or now) >= self.finished_dag_ttl
            limit = self.max_finished_dags if oldest.exported else self.max_unscraped_dags
            over = budget is not None and oldest.series >= 0 and self._scraped_series > budget
            if len(finished) <= limit and not aged and not over:
                break
            if not oldest.exported:
                self.unscraped_dropped += 1
            if oldest.series >= 0:
                self._scraped -= 1
                self._scraped_series -= oldest.series
            finished.popleft()
            oldest.forgotten = True
            oldest.job.held -= 1
            dropped += 1
            if self._on_forget is not None:
                self._on_forget(oldest)
        if dropped:
            self._jobs.evict()
        return dropped

    def _count_scraped(self) -> None:
        """Count in the finished DAGs scraped since the last call. A scrape marks every
        finished DAG it saw, so the scraped ones are the oldest; a DAG's series are counted
        once, after a scrape, when its activity counters (which come with the workers'
        heartbeats, after a short DAG ended) are there; those that come later are counted
        as they come (``series_added``)."""
        finished = self._finished
        while self._scraped < len(finished) and finished[self._scraped].exported:
            dag = finished[self._scraped]
            dag.series = self.series_of(dag)
            self._scraped_series += dag.series
            self._scraped += 1

    def series_added(self, dag: Dag) -> None:
        """``dag`` keeps one series more exported (an activity counter that came with a
        heartbeat): counted at once if its series were counted already."""
        if dag.series >= 0 and not dag.forgotten:
            dag.series += 1
            self._scraped_series += 1

    def series_of(self, dag: Dag) -> int:
        """The series a finished DAG keeps exported: its own (info, status, three times), a
        start and an end per worker that ran it, and what ``series_elsewhere`` counts."""
        own = 5 + 2 * len(dag.spans)
        return own + (self._series_elsewhere(dag) if self._series_elsewhere else 0)

    # -- monitor sessions ------------------------------------------------------------------

    @property
    def session(self) -> MonitorSession | None:
        """The running session, else the last one (None before the first)."""
        return self._sessions.current

    def start_session(self, metrics: Iterable[str] = (), owner: str | None = None
                      ) -> MonitorSession:
        return self._sessions.start(metrics, owner)

    def stop_session(self) -> MonitorSession:
        return self._sessions.stop()

    def sessions(self, since: int = -1) -> list[MonitorSession]:
        """Finished sessions with an id above ``since``, oldest first (bounded history)."""
        return self._sessions.finished(since)

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
        return take_snapshot(
            self._clock(), self.finished_dag_ttl,
            worker_table=self._workers, count_table=self._counts,
            finished_dags=self._finished, unfinished_dags=self._unfinished,
            sessions=self._sessions, completed=self.completed,
            unscraped=self.unscraped_dropped,
        )
