"""Dask plugins that give a running cluster what the preloads give one at its start.

``Monitor`` registers them (``Client.register_plugin``) on a cluster started without
dask-metrics: the scheduler plugin adds the job tracking, the worker plugin the GPU series
of every worker, those that join later included. The worker plugin travels by value, so a
worker without dask-metrics still loads it, and its setup fails with what to install; a
worker started with the preload is left as it is.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

SCHEDULER_PLUGIN = "dask-metrics-install"  # the JobPlugin it adds keeps its own name
WORKER_PLUGIN = "dask-metrics-gpu"
MISSING = "dask-metrics is not installed here"  # how a worker without it answers


class SchedulerInstaller(SchedulerPlugin):
    """Adds the scheduler preload's plugin, with the scheduler's Dask config, unless it is
    there."""

    name = SCHEDULER_PLUGIN
    idempotent = True  # a second Monitor's registration is a no-op

    async def start(self, scheduler: Any) -> None:
        from dask_metrics.exporter.scheduler.preload import install

        install(scheduler)


class WorkerInstaller(WorkerPlugin):
    """Samples and serves the worker's GPUs as the worker preload does, unless it does."""

    name = WORKER_PLUGIN
    idempotent = True

    def setup(self, worker: Any) -> None:
        try:
            from dask_metrics.exporter.worker import set_up
        except ImportError:
            raise ImportError(MISSING) from None
        self.mine = set_up(worker, {}, announce=True)

    def teardown(self, worker: Any) -> None:
        if getattr(self, "mine", False):
            from dask_metrics.exporter.worker import dask_teardown

            dask_teardown(worker)


async def uninstall(dask_scheduler: Any) -> None:
    """Remove what ``SchedulerInstaller`` added (``client.run_on_scheduler``)."""
    from dask_metrics.exporter.scheduler.preload import dask_teardown

    await dask_teardown(dask_scheduler)
