"""Scheduler preload: ``dask scheduler --preload dask_metrics.scheduler [--job-mode MODE]``.

A thin layer between Dask and :class:`~dask_metrics.exporter.job_tracker.JobTracker`: a
SchedulerPlugin feeds the tracker Dask's hooks, scheduler handlers let any client run monitor
sessions, and a Prometheus collector exports ``dask_job_*`` series on the scheduler's own
``/metrics`` (or on ``--metrics-port``). Every hook is guarded: a failure is logged and
counted in ``dask_job_plugin_errors_total``, and the scheduler carries on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import dask.config
import tornado.httpserver
import tornado.netutil
import tornado.web
import yaml
from dask.utils import parse_timedelta
from distributed.diagnostics.plugin import SchedulerPlugin
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from tornado.ioloop import PeriodicCallback

from dask_metrics.contract import (
    CURRENT_DAG,
    CURRENT_JOB,
    DAG_INFO,
    DAG_STATUS,
    DAGS_COMPLETED,
    MONITOR_START,
    MONITOR_STOP,
    PLUGIN_ERRORS,
    SCHEDULER_SPECS,
    WORKER_GPU_INFO,
    WORKER_TASKS,
    Handler,
)
from dask_metrics.exporter.identity import STARTUP_KEY, WorkerIdentity, worker_label
from dask_metrics.exporter.job_tracker import JobMode, JobTracker, SessionError, Snapshot

logger = logging.getLogger(__name__)

CONFIG_SECTION = "dask-metrics.scheduler"
PLUGIN_NAME = "dask-metrics-jobs"


def _load_defaults() -> None:
    """Register scheduler.yaml as Dask config defaults, the way Dask extensions do."""
    with open(Path(__file__).with_name("scheduler.yaml"), encoding="utf-8") as fh:
        dask.config.update_defaults(yaml.safe_load(fh))


_load_defaults()

HOOKS = (
    "update_graph",
    "transition",
    "add_worker",
    "remove_worker",
    "remove_client",
    "log_event",
    "evict",
    "collect",
)


def families(snap: Snapshot, errors: dict[str, int]) -> list[Metric]:
    """The metric families of one scrape."""
    fam = {spec.name: spec.family() for spec in SCHEDULER_SPECS}
    fam[CURRENT_JOB.name].add_metric([], snap.current_job)
    fam[CURRENT_DAG.name].add_metric([], snap.current_dag)
    for worker, job_id, dag_id, tasks in snap.worker_tasks:
        fam[WORKER_TASKS.name].add_metric([worker, str(job_id), str(dag_id)], tasks)
    for job_id, dag_id, job_name, client, status in snap.dags:
        fam[DAG_INFO.name].add_metric([str(job_id), str(dag_id), job_name, client], 1)
        fam[DAG_STATUS.name].add_metric([str(job_id), str(dag_id)], status)
    for status, count in snap.completed.items():
        fam[DAGS_COMPLETED.name].add_metric([status], count)
    if snap.session is not None:
        fam[MONITOR_START.name].add_metric([], snap.session[0])
        fam[MONITOR_STOP.name].add_metric([], snap.session[1])
    for worker, address, gpu, uuid in snap.gpus:
        fam[WORKER_GPU_INFO.name].add_metric([worker, address, str(gpu), uuid], 1)
    for hook, count in errors.items():
        fam[PLUGIN_ERRORS.name].add_metric([hook], count)
    return list(fam.values())


def _errors_family(errors: dict[str, int]) -> Metric:
    fam = PLUGIN_ERRORS.family()
    for hook, count in errors.items():
        fam.add_metric([hook], count)
    return fam


# -- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    job_mode: JobMode = JobMode.CLIENT
    prometheus_url: str | None = None
    metrics_port: int | None = None
    max_finished_dags: int = 1000
    finished_dag_ttl: float = 300.0
    max_jobs: int = 1000
    max_sessions: int = 100
    label_max_length: int = 128

    @classmethod
    def from_config(cls, **overrides: Any) -> Settings:
        """Dask config ``dask-metrics.scheduler.*``, overridden by non-None ``overrides``."""

        def get(name: str) -> Any:
            value = overrides.get(name.replace("-", "_"))
            return dask.config.get(f"{CONFIG_SECTION}.{name}") if value is None else value

        port = get("metrics-port")
        try:
            mode = JobMode(get("job-mode"))
        except ValueError:
            choices = ", ".join(m.value for m in JobMode)
            raise ValueError(f"{CONFIG_SECTION}.job-mode must be one of {choices}") from None
        return cls(
            job_mode=mode,
            prometheus_url=get("prometheus-url") or None,
            metrics_port=None if port is None or port == "" else int(port),
            max_finished_dags=int(get("max-finished-dags")),
            finished_dag_ttl=float(parse_timedelta(get("finished-dag-ttl"), default="s")),
            max_jobs=int(get("max-jobs")),
            max_sessions=int(get("max-sessions")),
            label_max_length=int(get("label-max-length")),
        )


# -- Prometheus exposure ----------------------------------------------------------------------


class _DefaultRegistryHub:
    """The one collector of this module on prometheus_client's default REGISTRY.

    Schedulers in one process (tests, notebooks) share REGISTRY, which would export their
    series twice: like Dask's own collectors, the newest live plugin is the one exported.
    Registered with the first plugin, unregistered with the last.
    """

    def __init__(self) -> None:
        self._plugins: list[JobPlugin] = []
        self._lock = threading.Lock()
        self._registered = False

    def add(self, plugin: JobPlugin) -> None:
        with self._lock:
            self._plugins.append(plugin)
            if not self._registered:
                try:
                    REGISTRY.register(self)
                    self._registered = True
                except ValueError:
                    logger.warning(
                        "dask-metrics: dask_job_* series already registered", exc_info=True
                    )

    def remove(self, plugin: JobPlugin) -> None:
        with self._lock:
            if plugin in self._plugins:
                self._plugins.remove(plugin)
            if not self._plugins and self._registered:
                REGISTRY.unregister(self)
                self._registered = False

    def describe(self) -> list[Metric]:
        return [spec.family() for spec in SCHEDULER_SPECS]

    def collect(self) -> list[Metric]:
        plugins = list(self._plugins)
        return plugins[-1].collect() if plugins else []


_HUB = _DefaultRegistryHub()


class _PluginCollector:
    """A registry entry for one plugin, for its own ``--metrics-port`` server."""

    def __init__(self, plugin: JobPlugin) -> None:
        self._plugin = plugin

    def describe(self) -> list[Metric]:
        return [spec.family() for spec in SCHEDULER_SPECS]

    def collect(self) -> list[Metric]:
        return self._plugin.collect()


class _MetricsHandler(tornado.web.RequestHandler):
    def initialize(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def get(self) -> None:
        encoder, content_type = choose_encoder(self.request.headers.get("Accept", ""))
        self.set_header("Content-Type", content_type)
        self.write(encoder(self._registry))


# -- the plugin --------------------------------------------------------------------------------

_CLIENT_ID = re.compile(
    r"[^-]+(?:-(?P<name>.+))?-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)
_TASK_OVER = frozenset({"memory", "erred", "forgotten"})

#: (submitting task, client-side annotations) of the graph submission being handled
_SUBMISSION: ContextVar[tuple[Any, Any]] = ContextVar(
    "dask_metrics_submission", default=(None, None)
)


def client_name(client_id: str) -> str:
    """The name a client was given (``Client(name=...)``, config ``client-name``), else its id."""
    match = _CLIENT_ID.fullmatch(client_id)
    return match["name"] if match and match["name"] else client_id


class JobPlugin(SchedulerPlugin):
    """Feeds a JobTracker from the scheduler's hooks and serves it to clients and Prometheus."""

    name = PLUGIN_NAME
    stop_poll_interval = 0.05  # seconds between checks while a stop waits for DAGs

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_config()
        s = self.settings
        self.tracker = JobTracker(
            s.job_mode,
            max_finished_dags=s.max_finished_dags,
            finished_dag_ttl=s.finished_dag_ttl,
            max_jobs=s.max_jobs,
            max_sessions=s.max_sessions,
            label_max_length=s.label_max_length,
        )
        self.errors: dict[str, int] = dict.fromkeys(HOOKS, 0)
        self.metrics_port: int | None = None
        self._last_logged: dict[str, float] = {}
        self._scheduler: Any = None
        self._stream_wrapper: Callable[..., Any] | None = None
        self._stream_original: Callable[..., Any] | None = None
        self._server: tornado.httpserver.HTTPServer | None = None
        self._evictor: PeriodicCallback | None = None

    # -- life cycle ----------------------------------------------------------------------

    def attach(self, scheduler: Any) -> None:
        """Hook into ``scheduler``; idempotent, so dask_setup and start() may both call it."""
        if self._scheduler is scheduler:
            return
        if self.settings.metrics_port is None:
            _HUB.add(self)
        else:
            self._serve(self.settings.metrics_port)  # may fail (port taken): nothing else done yet
        self._scheduler = scheduler
        scheduler.handlers.update(self.handlers())
        original = scheduler.stream_handlers.get("update-graph")
        if original is not None:
            self._stream_original = original
            self._stream_wrapper = self._wrap_update_graph(original)
            scheduler.stream_handlers["update-graph"] = self._stream_wrapper
        for address in list(scheduler.workers):
            self.add_worker(scheduler, address)
        period = max(0.1, min(self.settings.finished_dag_ttl / 2, 5.0))
        self._evictor = PeriodicCallback(self._evict, period * 1000)
        self._evictor.start()

    async def start(self, scheduler: Any) -> None:
        self.attach(scheduler)

    async def close(self) -> None:
        """Undo attach(); idempotent (dask_teardown and the scheduler's close both call it)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        _HUB.remove(self)
        if self._evictor is not None:
            self._evictor.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        for name, handler in self.handlers().items():
            if scheduler.handlers.get(name) == handler:
                del scheduler.handlers[name]
        if scheduler.stream_handlers.get("update-graph") is self._stream_wrapper:
            scheduler.stream_handlers["update-graph"] = self._stream_original

    def _serve(self, port: int) -> None:
        registry = CollectorRegistry()
        registry.register(_PluginCollector(self))
        app = tornado.web.Application([(r"/metrics", _MetricsHandler, {"registry": registry})])
        sockets = tornado.netutil.bind_sockets(port)
        self._server = tornado.httpserver.HTTPServer(app)
        self._server.add_sockets(sockets)
        self.metrics_port = sockets[0].getsockname()[1]
        logger.info("dask-metrics: serving dask_job_* on port %d /metrics", self.metrics_port)

    @staticmethod
    def _wrap_update_graph(original: Callable[..., Any]) -> Callable[..., Any]:
        """Dask tells plugins which client submitted a graph, but neither which task (for
        graphs submitted from inside tasks) nor the span the client submitted it in (Dask
        moves tasks into the span of an older TaskGroup with the same name). Both are in
        the client's message: hand them to the update_graph hook, which Dask calls within
        this coroutine, through a context variable."""

        async def update_graph(**msg: Any) -> Any:
            token = _SUBMISSION.set((msg.get("submitting_task"), msg.get("annotations")))
            try:
                return await original(**msg)
            finally:
                _SUBMISSION.reset(token)

        return update_graph

    # -- error accounting ------------------------------------------------------------------

    def _failed(self, hook: str) -> None:
        """Count a failed hook; log its traceback at most once a minute per hook."""
        self.errors[hook] = self.errors.get(hook, 0) + 1
        now = time.monotonic()
        if now - self._last_logged.get(hook, -60.0) >= 60.0:
            self._last_logged[hook] = now
            logger.exception(
                "dask-metrics: the %s hook failed (%d time(s) so far); the scheduler carries on",
                hook,
                self.errors[hook],
            )

    # -- scheduler hooks -------------------------------------------------------------------

    def update_graph(
        self,
        scheduler: Any,
        *,
        client: str,
        keys: Iterable[Any],
        tasks: Iterable[Any],
        **kwargs: Any,
    ) -> None:
        try:
            known = scheduler.tasks

            def state_of(key: Any) -> str | None:
                ts = known.get(key)
                return None if ts is None else ts.state

            submitter, annotations = _SUBMISSION.get()
            span = None
            if self.tracker.mode is JobMode.SPAN and submitter is None:
                span = submitted_span(annotations) or top_level_span(scheduler, keys)
            self.tracker.submit(
                client=client,
                tasks=tasks,
                wanted=keys,
                state_of=state_of,
                name=client_name(client),
                span=span,
                submitter=submitter,
            )
        except Exception:
            self._failed("update_graph")

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        try:
            if finish == "processing":
                ts = self._scheduler.tasks.get(key)
                ws = ts.processing_on if ts is not None else None
                self.tracker.transition(key, start, finish, ws.address if ws is not None else None)
            elif start == "processing" or finish in _TASK_OVER:
                self.tracker.transition(key, start, finish)
        except Exception:
            self._failed("transition")

    def add_worker(self, scheduler: Any, worker: str) -> None:
        try:
            ws = scheduler.workers[worker]
            gpus: list[tuple[int, str]] = []
            published = ws.extra.get(STARTUP_KEY)
            if published is not None:
                try:
                    gpus = [(g.index, g.uuid) for g in WorkerIdentity.from_dict(published).gpus]
                except ValueError as exc:
                    logger.warning("dask-metrics: worker %s: %s", worker, exc)
            self.tracker.add_worker(worker, worker_label(ws.name, ws.address), gpus)
        except Exception:
            self._failed("add_worker")

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        try:
            self.tracker.remove_worker(worker)
        except Exception:
            self._failed("remove_worker")

    def remove_client(self, scheduler: Any, client: str) -> None:
        try:
            self.tracker.client_left(client)
        except Exception:
            self._failed("remove_client")

    def log_event(self, topic: str, msg: Any) -> None:
        """Work stealing moves a task without a transition; only its log event tells."""
        if topic != "stealing":
            return
        try:
            if msg[0] == "confirm":  # (action, key, state, victim, thief, stimulus_id)
                self.tracker.task_moved(msg[1], msg[4])
        except Exception:
            self._failed("log_event")

    def _evict(self) -> None:
        try:
            self.tracker.evict()
        except Exception:
            self._failed("evict")

    # -- Prometheus --------------------------------------------------------------------------

    def collect(self) -> list[Metric]:
        """This scrape's families; a failure exports only the error counter, so a bug here
        never costs the scheduler its own /metrics."""
        try:
            return families(self.tracker.snapshot(), dict(self.errors))
        except Exception:
            self._failed("collect")
            return [_errors_family(dict(self.errors))]

    # -- handlers (client.scheduler.<name>(...)) ---------------------------------------------

    def handlers(self) -> dict[str, Callable[..., Any]]:
        return {
            Handler.MONITOR_START: self.monitor_start,
            Handler.MONITOR_STOP: self.monitor_stop,
            Handler.MONITOR_STATUS: self.monitor_status,
            Handler.MONITOR_SESSIONS: self.monitor_sessions,
            Handler.NEW_JOB: self.new_job,
            Handler.DAGS: self.dags,
            Handler.PROMETHEUS_URL: self.prometheus_url,
        }

    def monitor_start(self, metrics: Iterable[str] | str | None = None) -> dict[str, Any]:
        names = [metrics] if isinstance(metrics, str) else [str(m) for m in metrics or ()]
        try:
            session = self.tracker.start_session(names)
        except SessionError as exc:
            return self._refusal(exc)
        logger.info("dask-metrics: monitor session %d started", session.id)
        return {"ok": True, "session": session.to_dict()}

    async def monitor_stop(self, wait: bool = True, timeout: float | None = None) -> dict[str, Any]:
        """Stop the session; with ``wait``, once the DAGs unfinished now have finished.
        After ``timeout`` seconds of waiting the session is left running and ok is False."""
        session = self.tracker.session
        if session is None or session.stop is not None:
            return self._refusal(SessionError("no monitor session is running"))
        if wait:
            dags = self.tracker.unfinished()
            deadline = None if timeout is None else time.monotonic() + timeout
            while any(dag.finished is None for dag in dags):
                if deadline is not None and time.monotonic() >= deadline:
                    left = sum(dag.finished is None for dag in dags)
                    error = f"timed out after {timeout} s waiting for {left} DAG(s) to finish"
                    return self._refusal(SessionError(error + "; the session is still running"))
                await asyncio.sleep(self.stop_poll_interval)
        if self.tracker.session is not session:  # another client stopped and restarted it
            return self._refusal(SessionError(f"monitor session {session.id} was already stopped"))
        try:
            self.tracker.stop_session()
        except SessionError as exc:
            return self._refusal(exc)
        logger.info("dask-metrics: monitor session %d stopped", session.id)
        return {"ok": True, "session": session.to_dict()}

    def _refusal(self, exc: Exception) -> dict[str, Any]:
        session = self.tracker.session
        return {"ok": False, "error": str(exc), "session": session and session.to_dict()}

    def monitor_status(self) -> dict[str, Any]:
        session = self.tracker.session
        job_id, dag_id = self.tracker.current()
        return {
            "running": session is not None and session.stop is None,
            "session": session and session.to_dict(),
            "job_mode": self.tracker.mode.value,
            "current_job": job_id,
            "current_dag": dag_id,
            "unfinished_dags": len(self.tracker.unfinished()),
            "prometheus_url": self.settings.prometheus_url,
            "metrics_port": self.metrics_port,
        }

    def monitor_sessions(self, since: int = -1) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.tracker.sessions(since)]

    def new_job(self, name: str | None = None) -> dict[str, Any]:
        try:
            job = self.tracker.new_job(name)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "job_id": job.id}

    def dags(self, job_id: int | None = None) -> list[dict[str, Any]]:
        """The DAGs held (unfinished and recently finished), by job then DAG number."""
        held = [d for d in self.tracker.dags() if job_id is None or d.job.id == job_id]
        return [d.to_dict() for d in sorted(held, key=lambda d: (d.job.id, d.id))]

    def prometheus_url(self) -> str | None:
        return self.settings.prometheus_url


def submitted_span(annotations: Any) -> tuple[str, str] | None:
    """(id, name) of the top-level span the client submitted in (``with span(...)``)."""
    span = annotations.get("span") if isinstance(annotations, dict) else None
    if not span or not span.get("ids") or not span.get("name"):
        return None
    return str(span["ids"][0]), str(span["name"][0])


def top_level_span(scheduler: Any, keys: Iterable[Any]) -> tuple[str, str] | None:
    """(id, name) of the top-level span Dask put most of ``keys`` in (a collection built in
    a span, or the default span); None without the spans extension."""
    spans = scheduler.extensions.get("spans")
    if spans is None:
        return None
    known = scheduler.tasks
    votes = Counter(ts.group.span_id for key in keys if (ts := known.get(key)) is not None)
    votes.pop(None, None)
    if not votes:
        return None
    span = spans.spans.get(votes.most_common(1)[0][0])
    if span is None:
        return None
    while span.parent is not None:
        span = span.parent
    return span.id, span.name[0]


# -- preload entry points -------------------------------------------------------------------------


@click.command()
@click.option(
    "--job-mode",
    type=click.Choice([m.value for m in JobMode]),
    default=None,
    help=f"how submissions form jobs (default: config {CONFIG_SECTION}.job-mode, else client)",
)
@click.option("--prometheus-url", default=None, help="Prometheus URL advertised to Monitors")
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="serve dask_job_* on this port's /metrics instead of the scheduler's (0: any free)",
)
def dask_setup(
    scheduler: Any, job_mode: str | None, prometheus_url: str | None, metrics_port: int | None
) -> None:
    """Add the plugin to the scheduler (once: a second preload of it is ignored)."""
    if PLUGIN_NAME in scheduler.plugins:
        logger.warning(
            "dask-metrics: the scheduler already has %s; not adding it twice", PLUGIN_NAME
        )
        return
    settings = Settings.from_config(
        job_mode=job_mode, prometheus_url=prometheus_url, metrics_port=metrics_port
    )
    plugin = JobPlugin(settings)
    plugin.attach(scheduler)
    scheduler.add_plugin(plugin, name=PLUGIN_NAME)
    logger.info("dask-metrics: tracking jobs and DAGs, job mode %s", settings.job_mode.value)


async def dask_teardown(scheduler: Any) -> None:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, JobPlugin):
        await plugin.close()
        scheduler.remove_plugin(name=PLUGIN_NAME)
