"""Monitor sessions: what one records of the jobs and DAGs submitted while it ran, and the
log of the running one and those that finished. Kept apart from the tracker's task
bookkeeping: a session only ever sees whole DAGs as they are submitted."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dask_metrics.exporter.job_model import Dag


class SessionError(RuntimeError):
    """A monitor session request that does not fit the current session state."""


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


class SessionLog:
    """The running monitor session, else the last one, and a bounded history of those
    that finished; one runs at a time."""

    def __init__(self, clock: Callable[[], float], *, max_sessions: int,
                 max_session_jobs: int) -> None:
        self.max_session_jobs = max_session_jobs
        self._clock = clock
        self.current: MonitorSession | None = None
        self._ids = 0
        self._history: deque[MonitorSession] = deque(maxlen=max_sessions)

    def record(self, dag: Dag) -> None:
        """``dag`` was just submitted: the running session, if any, records it."""
        session = self.current
        if session is not None and session.stop is None:
            session.record(dag)

    def start(self, metrics: Iterable[str] = (), owner: str | None = None) -> MonitorSession:
        if self.current is not None and self.current.stop is None:
            raise SessionError(f"monitor session {self.current.id}{_by(self.current)} is "
                               "already running")
        self.current = MonitorSession(
            self._ids, self._clock(), tuple(metrics), max_jobs=self.max_session_jobs,
            owner=owner,
        )
        self._ids += 1
        return self.current

    def stop(self) -> MonitorSession:
        session = self.current
        if session is None or session.stop is not None:
            raise SessionError("no monitor session is running")
        session.stop = self._clock()
        self._history.append(session)
        return session

    def finished(self, since: int = -1) -> list[MonitorSession]:
        """Finished sessions with an id above ``since``, oldest first (bounded history)."""
        return [s for s in self._history if s.id > since]
