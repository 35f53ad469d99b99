"""``Monitor``: the original dask-metrics workflow on top of the scheduler preload and
Prometheus.

Sessions live on the scheduler (``dask_metrics.scheduler``), so one client can ``start`` a
session, disconnect, and another ``stop`` it and export it later. The data comes from
Prometheus: the URL is the constructor's argument, else ``DASK_METRICS_PROMETHEUS_URL``,
else a ``config`` file, else the URL the scheduler preload advertises.
"""

from __future__ import annotations

import logging
import math
import socket
import time
import warnings
from collections.abc import Sequence
from typing import Any

from dask_metrics.collector.errors import CollectorError, MonitorError, MonitorUsageError
from dask_metrics.collector.model.columns import DEFAULT_NAMES, select
from dask_metrics.collector.monitor import plugins
from dask_metrics.collector.monitor.identity import address_of, same_session, user_name
from dask_metrics.collector.monitor.options import (
    SCRAPE_WAIT,
    SCRAPE_WAIT_OPTION,
    STOP_TIMEOUT,
    STOP_TIMEOUT_OPTION,
    read,
)
from dask_metrics.collector.monitor.results import SessionResults
from dask_metrics.collector.monitor.stop_timeout import still_running, timed_out
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.report.notebook import monitor_html
from dask_metrics.collector.sources.session_window import Recorded, last_session, recorded_session
from dask_metrics.collector.store.connection import OPTIONS as CONNECTION_OPTIONS
from dask_metrics.contract import REPLICA_LABELS, DagStatus, Handler

DAG_FINISHED, DAG_ERRED = DagStatus.FINISHED, DagStatus.ERRED
logger = logging.getLogger("dask_metrics")


class Monitor(SessionResults):
    """``Monitor(client).attach([...]); start(); ...; stop(); to_csv(dir); peak_memory()``.

    ``prometheus`` and ``connection`` take the collector's connection options by their
    Python names (``user``, ``password_file``, ``bearer_token_file``, ``header`` (a list of
    ``"Name: value"``), ``ca_file``, ``cert``, ``key``, ``timeout``, ``retries``,
    ``compression``, ``read_api``).

    Every query is scoped to the Monitor's own Dask cluster (the ``dask_cluster`` label),
    whatever else Prometheus holds: ``cluster`` names it, else the scheduler tells
    (``Handler.CLUSTER``); a scheduler that does not leaves the queries unscoped, with a
    warning. ``replica_labels`` are added to the HA replica labels the merge ignores.
    """

    def __init__(self, client: Any, prometheus: str | None = None, *, config: str | None = None,
                 scrape_wait: float = SCRAPE_WAIT, stop_timeout: float = STOP_TIMEOUT,
                 cluster: str | None = None, replica_labels: Sequence[str] = (),
                 owner: str | None = None, **connection: Any) -> None:
        unknown = sorted(set(connection) - set(CONNECTION_OPTIONS))
        if unknown:
            raise MonitorUsageError(f"Monitor({unknown[0]}=...): unknown connection option "
                                    f"(known: {', '.join(CONNECTION_OPTIONS)})")
        self.client = client
        self._address = address_of(client)
        self.metrics: list[str] = list(DEFAULT_NAMES)
        self.scrape_wait = read(SCRAPE_WAIT_OPTION, scrape_wait)
        self.stop_timeout = read(STOP_TIMEOUT_OPTION, stop_timeout)
        if not callable(getattr(client, "sync", None)):  # Monitor("tcp://...") is a slip
            raise MonitorUsageError(f"Monitor needs a distributed.Client, not {client!r}")
        # "local": the scheduler's own Prometheus, started for this Monitor where none runs
        self._local = isinstance(prometheus, str) and prometheus.strip().lower() == "local"
        self._prometheus = None if self._local else prometheus
        self._config = config
        self._connection = connection
        self._replica_labels = tuple(dict.fromkeys([*REPLICA_LABELS, *replica_labels]))
        self._scope = None if cluster is None else Scope(cluster, self._replica_labels)
        # Sessions live on the scheduler, shared by every client: this Monitor stops and reads
        # the one it started (by id), and the scheduler refuses its stop to other owners. The
        # owner is the user on this host, not the client: the original workflow stops a
        # session from a new client (and a new Monitor) of the same user.
        self.owner = owner or f"{user_name()}@{socket.gethostname()}"
        # the session this Monitor started, as start() answered: its id and start time
        # identify it (a restarted scheduler numbers its sessions from 0 again)
        self._started: dict[str, Any] | None = None
        self._plugins_checked = False

    # ---- sessions (on the scheduler) -------------------------------------------------------

    def attach(self, metrics: Sequence[str] | str) -> Monitor:
        """Choose the metric columns that the next ``start`` records and ``to_csv`` writes.

        Refused (MonitorError) while a session runs: ``start`` recorded the session's
        columns on the scheduler, and every export of it — this Monitor's, another client's,
        ``collector monitor``/``collector watch`` — writes those, so changing them here
        alone would give one session two different exports. Stop the session first; the
        columns then apply to the next one."""
        names = [metrics] if isinstance(metrics, str) else metrics
        if not (isinstance(names, list | tuple) and all(isinstance(n, str) for n in names)):
            raise MonitorUsageError(f"attach() takes a metric name or a list of names, not "
                                    f"{metrics!r}")
        try:
            chosen = [c.name for c in select(list(names))]
        except ValueError as exc:
            raise MonitorUsageError(f"attach(): {exc}") from None
        self._ensure_plugins()
        status = self.status()
        session = status.get("session") or {}
        if status.get("running"):
            recorded = ", ".join(session.get("metrics") or ()) or "the default metrics"
            raise MonitorError(
                f"monitor session {session.get('id', '?')} is already running and records "
                f"{recorded}: attach() chooses the columns of the next start(); stop() the "
                "session first")
        self.metrics = chosen
        return self

    def start(self) -> dict[str, Any]:
        """Start a monitor session, owned by this Monitor; refused while one runs (from any
        client)."""
        self._ensure_plugins()
        reply = self._checked(self._versioned(Handler.MONITOR_START, {"owner": self.owner},
                                              metrics=self.metrics))
        self._started = dict(reply["session"])
        return reply

    def stop(self, force: bool = False, timeout: float | None = None,
             any_owner: bool = False) -> dict[str, Any]:
        """Stop the session this Monitor started (or, where it started none, the running
        one) once the DAGs unfinished now have finished; ``force`` stops at once.
        ``timeout``: seconds to wait for them (None: the Monitor's ``stop_timeout``, 60 by
        default; ``math.inf``: no limit). On a timeout the session keeps running and
        MonitorError says which jobs and DAGs are still running and how many tasks are in
        flight. Another client's session is refused unless ``any_owner``: then whatever
        session runs is stopped.

        A session that ended with its scheduler (restarted while it ran) has nothing left to
        stop: it is returned as Prometheus recorded it, ``"interrupted": True``, with a
        warning (also to a new Monitor, when the scheduler has run no session since)."""
        timeout = self.stop_timeout if timeout is None else read(STOP_TIMEOUT_OPTION, timeout,
                                                                   "timeout")
        limit = None if math.isinf(timeout) else float(timeout)
        if self._started is not None and not any_owner:
            session, known = self._mine(self._started)
            if not known and session["stop"] is not None:  # ended with its scheduler
                return {"ok": True, "session": session,
                        "interrupted": bool(session["interrupted"])}
        mine = {"owner": self.owner, "any_owner": bool(any_owner),
                "session_id": None if any_owner or self._started is None
                else int(self._started["id"])}
        reply = self._versioned(Handler.MONITOR_STOP, mine, wait=not force, timeout=limit)
        if not force and not reply.get("ok") and timed_out(reply):
            raise MonitorError(self._still_running(reply, timeout))
        if not reply.get("ok") and self._started is None and not reply.get("session"):
            interrupted = self._interrupted_last()  # a restart left no session to stop
            if interrupted is not None:
                return {"ok": True, "session": interrupted, "interrupted": True}
        return self._checked(reply)

    def status(self) -> dict[str, Any]:
        return self._call(Handler.MONITOR_STATUS)

    def _repr_html_(self) -> str:
        """Jupyter's view of the Monitor: its scheduler's session, as the scheduler says."""
        try:
            status = self.status()
        except Exception as exc:  # a closed client or a gone scheduler: say so, show the rest
            status = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        return monitor_html(self._address, self.owner, self.metrics, self._started, status)

    def new_job(self, name: str | None = None) -> int:
        """Start the next job (the scheduler's ``--job-mode manual``); returns its number."""
        return int(self._checked(self._call(Handler.NEW_JOB, name=name))["job_id"])

    def sessions(self) -> list[dict[str, Any]]:
        """The stopped sessions the scheduler still remembers, oldest first."""
        return list(self._call(Handler.MONITOR_SESSIONS))

    def session(self) -> dict[str, Any]:
        """The session this Monitor started, else the running or last one: ``{"id",
        "start", "stop", "metrics", "owner", ...}``. Always the one asked for: a session
        another client started since is never returned in its place.

        A session the scheduler no longer knows (it restarted) comes from Prometheus, with
        a warning: ended at the old scheduler's last scrape, ``"interrupted": True``, its
        DAGs not recorded (``"jobs": None``)."""
        if self._started is not None:
            return self._mine(self._started)[0]
        session = self.status().get("session")
        if session:
            return session
        interrupted = self._interrupted_last()
        if interrupted is None:
            raise MonitorError("no monitor session yet: call Monitor.start() first")
        return interrupted

    def _mine(self, started: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The session this Monitor started, and whether the scheduler still knows it
        (running, or remembered since it stopped); from Prometheus where it does not."""
        current = self.status().get("session")
        if current and same_session(current, started):
            return current, True
        for old in self._call(Handler.MONITOR_SESSIONS, since=int(started["id"]) - 1):
            if same_session(old, started):
                return old, True
        return self.recorded(started), False

    def recorded(self, session: dict[str, Any], patience: float | None = None
                 ) -> dict[str, Any]:
        """``session`` (as the scheduler gave it once) as Prometheus recorded it: for a
        session its scheduler no longer knows. Stopped, running, or ended with its scheduler
        (``"interrupted": True``, with a warning); its DAGs unknown (``"jobs": None``).
        Right after a restart Prometheus still shows the session running until it scrapes
        the new scheduler: waited for, at most ``patience`` seconds (the Monitor's
        ``scrape_wait`` by default)."""
        deadline = time.monotonic() + (self.scrape_wait if patience is None else patience)
        with self._prometheus_client() as prom:
            while True:
                found = recorded_session(prom, float(session["start"]), time.time(),
                                         self.scope())
                if found is None or found.stop is not None or time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
        if found is None:
            raise MonitorError(
                f"monitor session {session['id']} is no longer known to the scheduler "
                "(restarted, or more sessions since than it keeps) and no scrape of "
                "Prometheus showed it: nothing of it was recorded")
        return self._as_session(found, session)

    def _interrupted_last(self) -> dict[str, Any] | None:
        """The cluster's last session as Prometheus recorded it, where it ended with its
        scheduler (a new Monitor after a restart); None otherwise."""
        try:
            with self._prometheus_client() as prom:
                found = last_session(prom, time.time(), self.scope())
        except CollectorError:  # no Prometheus to ask, or no session in it: nothing found
            return None
        return self._as_session(found, {}) if found.interrupted else None

    def _as_session(self, found: Recorded, started: dict[str, Any]) -> dict[str, Any]:
        """A session dict (as the scheduler's) of a session Prometheus recorded; its DAGs
        were recorded on the scheduler only, and are unknown."""
        what = f"monitor session {started['id']}" if started else "the last monitor session"
        if found.interrupted:
            warnings.warn(found.note(what), stacklevel=4)
        return {"id": started.get("id"), "scheduler_start": started.get("scheduler_start"),
                "start": found.start, "stop": found.stop,
                "metrics": list(started.get("metrics") or self.metrics),
                "owner": started.get("owner"), "jobs": None, "unrecorded_dags": 0,
                "interrupted": found.interrupted}

    # ---- plumbing --------------------------------------------------------------------------

    def _ensure_plugins(self) -> None:
        """Give a cluster started without dask-metrics its plugins (once per Monitor), and
        a Prometheus where it asks for the local one: the original workflow needs no change
        to the cluster."""
        if self._plugins_checked:
            return
        self._require_open()
        added = time.time()
        fresh = plugins.ensure(self.client)
        if self._local:
            reply = self._checked(self._call(Handler.LOCAL_PROMETHEUS))
            self._prometheus = reply["url"]
            logger.warning("dask-metrics: the cluster's local Prometheus is at %s, data in %s "
                           "(kept after the cluster stops)", reply["url"], reply["folder"])
        if fresh:  # where a Prometheus is configured: the session's first seconds kept
            plugins.await_endpoints(self.client, self._prometheus_client, self.scope,
                                            added, self.scrape_wait)
        self._plugins_checked = True

    def scope(self) -> Scope:
        """The queries' scope: this Monitor's cluster, asked of the scheduler once (its
        ``Handler.CLUSTER`` answers the name); unscoped, with a warning, where it does not."""
        if self._scope is None:
            try:
                reply = self.client.sync(getattr(self.client.scheduler, Handler.CLUSTER))
            except Exception:  # an older preload: an unknown handler may raise or answer None
                reply = None
            if isinstance(reply, dict):
                reply = reply.get("cluster")
            if isinstance(reply, str):
                self._scope = Scope(reply, self._replica_labels)
            else:
                warnings.warn("the scheduler does not tell its Dask cluster's name "
                              f"({Handler.CLUSTER}): results are not scoped to one cluster "
                              "and include every cluster this Prometheus holds; pass "
                              "Monitor(client, cluster=NAME) to scope them", stacklevel=3)
                self._scope = Scope(None, self._replica_labels)
        return self._scope

    def _call(self, handler: str, **kwargs: Any) -> Any:
        """Call a scheduler preload handler; every one of them answers something, and a
        scheduler without the preload answers None (and logs the unknown handler). A
        scheduler without it (started so, or restarted since the plugins were registered)
        is given the plugins, once, and asked again."""
        self._require_open()
        reply = self.client.sync(getattr(self.client.scheduler, handler), **kwargs)
        if reply is None and plugins.ensure(self.client):
            reply = self.client.sync(getattr(self.client.scheduler, handler), **kwargs)
        if reply is None:
            raise MonitorError("the scheduler has no dask-metrics preload: start it with "
                               "'dask scheduler --preload dask_metrics.scheduler'")
        return reply

    def _versioned(self, handler: str, newer: dict[str, Any], **kwargs: Any) -> Any:
        """Call ``handler`` with ``newer`` arguments too; a preload older than them (its
        handler refuses unknown keywords) is called without, with a warning: its sessions
        have no owner."""
        try:
            return self._call(handler, **kwargs, **newer)
        except TypeError as exc:
            if not any(name in str(exc) for name in newer):
                raise
        warnings.warn("the scheduler's dask-metrics preload is older than this Monitor: its "
                      "sessions have no owner, so any client may stop them", stacklevel=3)
        return self._call(handler, **kwargs)

    def _still_running(self, reply: dict[str, Any], timeout: float) -> str:
        """The timeout message: what the stop waited for, read from the scheduler now."""
        dags = reply.get("unfinished")  # a scheduler that lists them in its reply
        if dags is None:
            dags = [d for d in self._call(Handler.DAGS) if d.get("finished") is None]
        try:
            processing = self.client.sync(self.client.scheduler.processing)
        except Exception:  # only detail for the message: never hide the timeout behind it
            processing = None
        return still_running(reply, timeout, dags, processing)

    def _require_open(self) -> None:
        """A closed Client has no scheduler to call (an AttributeError deep in Dask)."""
        if getattr(self.client, "status", None) in ("closing", "closed"):
            again = f"Client({self._address!r})" if self._address else "Client(address)"
            raise MonitorError(f"the client is closed: make a Monitor of an open one "
                               f"(Monitor({again})); sessions live on the scheduler, so the "
                               "new one sees the same session")

    @staticmethod
    def _checked(reply: dict[str, Any]) -> dict[str, Any]:
        if not reply.get("ok"):
            raise MonitorError(str(reply.get("error") or reply))
        return reply
