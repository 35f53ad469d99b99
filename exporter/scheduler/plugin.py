"""The SchedulerPlugin: feeds a JobTracker from Dask's hooks and exports it. Every hook is
guarded: a failure is logged and counted in ``dask_job_plugin_errors_total``, and the
scheduler carries on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from prometheus_client.metrics_core import Metric
from tornado.ioloop import PeriodicCallback

from dask_metrics.contract import DASK_CLUSTER, Handler
from dask_metrics.exporter import cluster as cluster_name
from dask_metrics.exporter.activity_ledger import ActivityLedger
from dask_metrics.exporter.dask_http import dashboard_url, http_application
from dask_metrics.exporter.identity import STARTUP_KEY, WorkerIdentity, worker_label
from dask_metrics.exporter.job_model import JobMode
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.scheduler import dask_internals
from dask_metrics.exporter.scheduler.families import (
    HUB,
    SourceCollector,
    errors_family,
    families,
    lifetime_label,
)
from dask_metrics.exporter.scheduler.fine import ClusterTotals, fine_snapshot
from dask_metrics.exporter.scheduler.handlers import MonitorHandlers
from dask_metrics.exporter.scheduler.local_prometheus import (
    LOCAL,
    LocalPrometheus,
    LocalPrometheusError,
)
from dask_metrics.exporter.scheduler.serving import MetricsServer
from dask_metrics.exporter.scheduler.settings import Settings
from dask_metrics.exporter.scheduler.targets import TARGETS_PATH, cluster_targets, serve_targets

logger = logging.getLogger(__name__)

PLUGIN_NAME = "dask-metrics-jobs"
HOOKS = (
    "update_graph",
    "transition",
    "add_worker",
    "remove_worker",
    "remove_client",
    "log_event",
    "evict",
    "heartbeat",
    "collect",
)
_TASK_OVER = frozenset({"memory", "erred", "forgotten"})
_ROUTED = "_dask_metrics_targets"  # marks a scheduler's HTTP application as routed


def _attached(scheduler: Any) -> list[dict[str, Any]] | None:
    """The target groups of the plugin attached to ``scheduler`` now, if any: the route
    outlives a plugin removed and added again."""
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    return plugin.targets() if isinstance(plugin, JobPlugin) else None


class JobPlugin(SchedulerPlugin):
    """Feeds a JobTracker from the scheduler's hooks and serves it to clients and Prometheus."""

    name = PLUGIN_NAME

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_config()
        s = self.settings
        # Dask's fine performance metrics per job, DAG and prefix (fed by heartbeats)
        self.ledger = ActivityLedger(s.max_prefixes_per_job, s.label_max_length,
                                     lambda dag: self.tracker.series_added(dag))
        self.cluster_totals = ClusterTotals()  # the same outside task execution
        self.tracker = JobTracker(
            s.job_mode,
            max_finished_dags=s.max_finished_dags,
            max_unscraped_dags=s.max_unscraped_dags,
            max_finished_series=s.max_finished_series,
            finished_dag_ttl=s.finished_dag_ttl,
            max_jobs=s.max_jobs,
            max_sessions=s.max_sessions,
            label_max_length=s.label_max_length,
            on_forget=self.ledger.forget,
            series_elsewhere=self.ledger.counters_of,
        )
        self._local: LocalPrometheus | None = None  # --prometheus local
        self.monitor = MonitorHandlers(self.tracker, self._prometheus_url,
                                       lambda: self.metrics_port,
                                       lambda: self.cluster,
                                       lambda: lifetime_label(self.started))
        # The dask_cluster label: the setting, else derived from the scheduler at attach.
        self.cluster: str | None = s.cluster
        self.errors: dict[str, int] = dict.fromkeys(HOOKS, 0)
        self.metrics_port: int | None = None
        self._last_logged: dict[str, float] = {}
        self._scheduler: Any = None
        self._detach: list[Callable[[], None]] = []
        self._server: MetricsServer | None = None
        self._evictor: PeriodicCallback | None = None
        # this scheduler's life (the scheduler_start label): ids count from 0 within it
        self.started = time.time()

    # -- life cycle ----------------------------------------------------------------------

    def attach(self, scheduler: Any) -> None:
        """Hook into ``scheduler``; idempotent, so dask_setup and start() may both call it."""
        if self._scheduler is scheduler:
            return
        if self.settings.cluster is None:
            self.cluster = cluster_name.scheduler_default(
                dask_internals.scheduler_address(scheduler))
        if self.settings.prometheus == LOCAL and self._local is None:
            local = self._local_of(scheduler)
            local.start()  # may fail (no binary, port taken): nothing else done yet
            self._local = local
        if self.settings.metrics_port is None:
            HUB.add(self)
        else:  # may fail (port taken): nothing else done yet
            self._server = MetricsServer(SourceCollector(self), self.settings.metrics_port,
                                         self.settings.metrics_address)
            self.metrics_port = self._server.port
            logger.info("dask-metrics: serving dask_job_* on port %d /metrics", self.metrics_port)
        self._scheduler = scheduler
        self.started = time.time()
        self._detach = [
            dask_internals.add_handlers(scheduler, {
                **self.monitor.handlers(), Handler.IDENTITY: self.identity,
                Handler.LOCAL_PROMETHEUS: self.local_prometheus}),
            dask_internals.tap_update_graph(scheduler),
        ]
        untap = dask_internals.tap_span_heartbeats(scheduler, self._heartbeat)
        if untap is None:
            logger.warning("dask-metrics: this scheduler has no spans extension: no "
                           "dask_job_activity_* series per job (the cluster-wide ones stay)")
        else:
            self._detach.append(untap)
        app = http_application(scheduler)
        if app is not None and not getattr(app, _ROUTED, False):
            serve_targets(app, lambda: _attached(scheduler))
            setattr(app, _ROUTED, True)
        for address in dask_internals.worker_addresses(scheduler):
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
        HUB.remove(self)
        if self._local is not None:
            self._local.stop()
        if self._evictor is not None:
            self._evictor.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None
        for undo in self._detach:
            undo()
        self._detach = []

    # -- a local Prometheus --------------------------------------------------------------------

    def _local_of(self, scheduler: Any) -> LocalPrometheus:
        s = self.settings
        return LocalPrometheus.of_cluster(dashboard_url(scheduler, TARGETS_PATH),
                                          self.cluster or "", s.local_prometheus_dir,
                                          s.local_prometheus_port)

    def _prometheus_url(self) -> str | None:
        """The Prometheus advertised to Monitors: the local one where it runs."""
        local = self._local
        return local.url if local is not None and local.running else self.settings.prometheus_url

    async def local_prometheus(self) -> dict[str, Any]:
        """Start the local Prometheus unless it runs (``Monitor(prometheus="local")``)."""
        if self._local is None or not self._local.running:
            if self._scheduler is None:
                return {"ok": False, "error": "dask-metrics' plugin is not attached"}
            try:
                local = self._local_of(self._scheduler)
                local.launch()  # here: the child dies with this (the event loop's) thread
                await asyncio.to_thread(local.wait_ready)
            except LocalPrometheusError as exc:
                return {"ok": False, "error": str(exc)}
            self._local = local
        return {"ok": True, "url": self._local.url, "folder": str(self._local.folder)}

    def identity(self, worker: str, identity: Any) -> dict[str, Any]:
        """Take a worker's identity from a worker plugin added after it registered."""
        scheduler = self._scheduler
        if scheduler is None or not dask_internals.publish(scheduler, worker, STARTUP_KEY,
                                                           identity):
            return {"ok": False, "error": f"no worker {worker!r} here"}
        self.add_worker(scheduler, worker)
        return {"ok": True}

    # -- service discovery -------------------------------------------------------------------

    def targets(self) -> list[dict[str, Any]] | None:
        """The http_sd target groups of this cluster now; None once detached."""
        scheduler, cluster = self._scheduler, self.cluster
        if scheduler is None or cluster is None:
            return None
        own = None if self._server is None else self._server.port
        return cluster_targets(scheduler, cluster, own, self.settings.metrics_address)

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
            submitter = dask_internals.submitting_task()
            span = None
            if self.tracker.mode is JobMode.SPAN and submitter is None:
                span = dask_internals.submitted_span() or dask_internals.top_level_span(
                    scheduler, keys
                )
            dag = self.tracker.submit(
                client=client,
                tasks=tasks,
                wanted=keys,
                state_of=dask_internals.task_states(scheduler),
                name=dask_internals.client_name(client),
                span=span,
                submitter=submitter,
            )
            owner = self.tracker.owner
            self.ledger.observe(dag, dask_internals.span_prefixes(
                scheduler, (key for key in tasks if owner(key) is dag)))
        except Exception:
            self._failed("update_graph")

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        try:
            if finish == "processing":
                worker = dask_internals.processing_worker(self._scheduler, key)
                self.tracker.transition(key, start, finish, worker)
            elif start == "processing" or finish in _TASK_OVER:
                self.tracker.transition(key, start, finish)
        except Exception:
            self._failed("transition")

    def add_worker(self, scheduler: Any, worker: str) -> None:
        try:
            name, address, published = dask_internals.worker_info(scheduler, worker, STARTUP_KEY)
            gpus: list[tuple[int, str]] = []
            if published is not None:
                try:
                    identity = WorkerIdentity.from_dict(published)
                except ValueError as exc:
                    logger.warning("dask-metrics: worker %s: %s", worker, exc)
                else:
                    gpus = [(g.index, g.uuid) for g in identity.gpus]
                    if identity.cluster and identity.cluster != self.cluster:
                        logger.warning(
                            "dask-metrics: worker %s labels its series %s=%r, this "
                            "scheduler %r: its GPUs will not match this cluster's dashboards",
                            worker, DASK_CLUSTER, identity.cluster, self.cluster)
            self.tracker.add_worker(worker, worker_label(name, address), gpus)
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
        try:
            moved = dask_internals.stolen(topic, msg)
            if moved is not None:
                self.tracker.task_moved(*moved)
        except Exception:
            self._failed("log_event")

    def _heartbeat(self, deltas: Any) -> None:
        """A worker heartbeat's additions to the spans' fine performance metrics."""
        try:
            self.ledger.add(deltas)
        except Exception:
            self._failed("heartbeat")

    def _evict(self) -> None:
        try:
            self.tracker.evict()
        except Exception:
            self._failed("evict")

    # -- Prometheus --------------------------------------------------------------------------

    def collect(self) -> list[Metric]:
        """This scrape's families; a failure exports only the error counter, so a bug here
        never costs the scheduler its own /metrics. Nothing before attach() has named the
        cluster: no series can carry a wrong dask_cluster."""
        cluster = self.cluster
        if cluster is None:
            return []
        try:
            scheduler = self._scheduler
            fine = None if scheduler is None else fine_snapshot(scheduler, self.tracker,
                                                                self.ledger, self.cluster_totals)
            return families(self.tracker.snapshot(), dict(self.errors), cluster, fine,
                            self.started)
        except Exception:
            self._failed("collect")
            return [errors_family(dict(self.errors), cluster)]
