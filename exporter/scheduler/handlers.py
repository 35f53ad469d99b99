"""The monitor-session handlers: the scheduler keeps monitor sessions, so any client (a
Monitor, ``collector monitor``) can start, inspect or stop them, whoever started them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from dask_metrics.contract import Handler
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.monitor_session import MonitorSession, SessionError
from dask_metrics.values import finite_number

logger = logging.getLogger(__name__)


class MonitorHandlers:
    """The scheduler handlers (``client.scheduler.<name>(...)``) over one JobTracker.

    Refusals are replies (``{"ok": False, "error": ...}``), not exceptions, so a client's
    mistake leaves no traceback in the scheduler's log."""

    stop_poll_interval = 0.05  # seconds between checks while a stop waits for DAGs

    def __init__(
        self,
        tracker: JobTracker,
        prometheus_url: Callable[[], str | None],
        metrics_port: Callable[[], int | None],
        cluster: Callable[[], str | None] = lambda: None,
        lifetime: Callable[[], str] = lambda: "",
    ) -> None:
        self.tracker = tracker
        self._prometheus_url = prometheus_url  # the setting's, or a local Prometheus'
        self._metrics_port = metrics_port  # known only once the plugin serves
        self._cluster = cluster  # known once the plugin is attached
        self._lifetime = lifetime  # the scheduler_start label of this scheduler's series

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {
            Handler.MONITOR_START: self.monitor_start,
            Handler.MONITOR_STOP: self.monitor_stop,
            Handler.MONITOR_STATUS: self.monitor_status,
            Handler.MONITOR_SESSIONS: self.monitor_sessions,
            Handler.NEW_JOB: self.new_job,
            Handler.DAGS: self.dags,
            Handler.PROMETHEUS_URL: self.prometheus_url,
            Handler.CLUSTER: self.cluster,
        }

    def monitor_start(self, metrics: Iterable[str] | str | None = None,
                      owner: str | None = None) -> dict[str, Any]:
        if isinstance(metrics, str):
            metrics = [metrics]
        if not (metrics is None or (isinstance(metrics, list | tuple)
                and all(isinstance(m, str) for m in metrics))):
            return self._refusal(SessionError("metrics must be a metric name or a list of them"))
        if not (owner is None or (isinstance(owner, str) and 0 < len(owner) <= MAX_OWNER)):
            return self._refusal(SessionError(f"owner must be a string of 1 to {MAX_OWNER} "
                                              "characters (or None)"))
        names = list(metrics or ())
        try:
            session = self.tracker.start_session(names, owner)
        except SessionError as exc:
            return self._refusal(exc)
        logger.info("dask-metrics: monitor session %d started", session.id)
        return {"ok": True, "session": self._described(session)}

    async def monitor_stop(self, wait: bool = True, timeout: float | None = None,
                           session_id: int | None = None, owner: str | None = None,
                           any_owner: bool = False) -> dict[str, Any]:
        """Stop the session; with ``wait``, once the DAGs unfinished now have finished.
        After ``timeout`` seconds of waiting the session is left running and ok is False.

        ``session_id``: stop only that session; a session with an owner is stopped only by
        that ``owner``, or with ``any_owner`` (a caller that names none is another client)."""
        if not isinstance(wait, bool) or not (timeout is None or _seconds(timeout)) \
                or not (session_id is None or _whole(session_id)) \
                or not (owner is None or isinstance(owner, str)) or not isinstance(any_owner, bool):
            return self._refusal(SessionError("wait and any_owner must be true or false, timeout "
                                              "a number of seconds (or None), session_id a "
                                              "session's id and owner a string (or None)"))
        session = self.tracker.session
        if session is None or session.stop is not None:
            ended = "" if session_id is None else f" (session {session_id} has ended)"
            return self._refusal(SessionError(f"no monitor session is running{ended}"))
        if (refused := _not_yours(session, session_id, owner, any_owner)) is not None:
            return self._refusal(SessionError(refused))
        if wait:
            dags = self.tracker.unfinished()
            deadline = None if timeout is None else time.monotonic() + timeout
            while any(dag.finished is None for dag in dags):
                if deadline is not None and time.monotonic() >= deadline:
                    left = [dag for dag in dags if dag.finished is None]
                    error = f"timed out after {timeout} s waiting for {len(left)} DAG(s) to finish"
                    reply = self._refusal(SessionError(error + "; the session is still running"))
                    reply["timed_out"] = True  # what is left, for the caller's message
                    reply["unfinished"] = [{**dag.to_dict(), "pending": dag.pending}
                                           for dag in left]
                    return reply
                await asyncio.sleep(self.stop_poll_interval)
        if self.tracker.session is not session:  # another client stopped and restarted it
            return self._refusal(SessionError(f"monitor session {session.id} was already stopped"))
        try:
            self.tracker.stop_session()
        except SessionError as exc:
            return self._refusal(exc)
        logger.info("dask-metrics: monitor session %d stopped", session.id)
        return {"ok": True, "session": self._described(session)}

    def _refusal(self, exc: Exception) -> dict[str, Any]:
        session = self.tracker.session
        return {"ok": False, "error": str(exc), "session": self._described(session)}

    def monitor_status(self) -> dict[str, Any]:
        session = self.tracker.session
        job_id, dag_id = self.tracker.current()
        return {
            "running": session is not None and session.stop is None,
            "session": self._described(session),
            "job_mode": self.tracker.mode.value,
            "current_job": job_id,
            "current_dag": dag_id,
            "unfinished_dags": len(self.tracker.unfinished()),
            "prometheus_url": self._prometheus_url(),
            "metrics_port": self._metrics_port(),
            "dask_cluster": self._cluster(),
        }

    def monitor_sessions(self, since: int = -1) -> list[dict[str, Any]] | dict[str, Any]:
        if not _whole(since):
            return self._refusal(SessionError("since must be a session id"))
        return [self._described(s) for s in self.tracker.sessions(since)]

    def _described(self, session: MonitorSession | None) -> dict[str, Any] | None:
        """A session as the handlers answer it: with its scheduler's life, which tells it
        (and its jobs' series) from a restarted scheduler's session of the same id."""
        if session is None:
            return None
        return {**session.to_dict(), "scheduler_start": self._lifetime()}

    def new_job(self, name: str | None = None) -> dict[str, Any]:
        if not (name is None or isinstance(name, str)):
            return {"ok": False, "error": "name must be a string (or None)"}
        try:
            job = self.tracker.new_job(name)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "job_id": job.id}

    def dags(self, job_id: int | None = None) -> list[dict[str, Any]] | dict[str, Any]:
        """The DAGs held (unfinished and recently finished), by job then DAG number."""
        if not (job_id is None or _whole(job_id)):
            return {"ok": False, "error": "job_id must be a job's number (or None)"}
        held = [d for d in self.tracker.dags() if job_id is None or d.job.id == job_id]
        return [d.to_dict() for d in sorted(held, key=lambda d: (d.job.id, d.id))]

    def prometheus_url(self) -> str | None:
        return self._prometheus_url()

    def cluster(self) -> str | None:
        """The dask_cluster label of this cluster's series: what workers and sidecars use."""
        return self._cluster()


MAX_OWNER = 200  # characters of a session's owner


def _not_yours(session: Any, session_id: int | None, owner: str | None, any_owner: bool
               ) -> str | None:
    """Why a caller may not stop the running ``session``, or None when it may."""
    if session_id is not None and session.id != session_id:
        by = f", started by {session.owner}" if session.owner else ""
        return (f"monitor session {session_id} is not running: session {session.id}{by} is, "
                "and is left running")
    if session.owner and owner != session.owner and not any_owner:
        return (f"monitor session {session.id} was started by {session.owner}, not by this "
                "client: stop(any_owner=True) (collector monitor stop --any-owner) stops it "
                "anyway")
    return None


def _whole(value: Any) -> bool:
    """An int that is not a bool: what an id argument must be."""
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(value: Any) -> bool:
    """A finite, non-negative number of seconds (a number, not a bool or a string)."""
    number = finite_number(value, text=False)
    return number is not None and number >= 0
