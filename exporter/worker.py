"""``dask worker --preload dask_metrics.worker``: GPU series on the worker's own /metrics.

It also publishes the worker's identity (name, address, pid, GPU UUIDs) to the scheduler,
through the worker's ``startup_information``, and, when asked, to a worker-info file that
a sidecar exporter reads. The ``dask_cluster`` label's value is the worker's own setting,
else what the scheduler says once asked: until then the worker exports no GPU series.
Nothing here may stop a worker from starting: every failure is logged and the worker
carries on without GPU metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click
import dask.config
from prometheus_client import REGISTRY

from dask_metrics.configfile import ConfigError
from dask_metrics.contract import DASK_CLUSTER, Handler
from dask_metrics.exporter import cluster as cluster_name
from dask_metrics.exporter.cli import make_sampler
from dask_metrics.exporter.config import ENV_PREFIX, OPTIONS, ExporterConfig, resolve
from dask_metrics.exporter.dask_http import dashboard_url, watch_scrapes
from dask_metrics.exporter.gpu_collector import GpuCollector
from dask_metrics.exporter.identity import (
    STARTUP_KEY,
    GpuRef,
    WorkerIdentity,
    worker_label,
    write_info_file,
)
from dask_metrics.exporter.learn_cluster import scheduler_cluster
from dask_metrics.exporter.sampler import Sampler
from dask_metrics.exporter.scrapes import ScrapeLog
from dask_metrics.exporter.target import TargetSource

logger = logging.getLogger(__name__)

CONFIG_SECTION = "dask-metrics.exporter"
DASK_NVML = "distributed.diagnostics.nvml"  # Dask's own switch for NVML in its processes

# Several workers can share one process (LocalCluster(processes=False)) and so one registry:
# one collector serves every live sampler of the process.
_samplers: dict[int, Sampler] = {}
_learners: dict[int, asyncio.Task[None]] = {}  # asking the scheduler for dask_cluster
_announcing: set[asyncio.Task[None]] = set()  # identities on their way to the scheduler
_set_up: set[int] = set()  # the workers (by id) whose GPUs are sampled and published
_collector = GpuCollector(lambda: [s.snapshot for s in list(_samplers.values())])
_scrapes = ScrapeLog()  # of every worker's /metrics in the process: each serves all samplers


# Options of the sidecar's own HTTP server: the worker serves /metrics on Dask's server.
SIDECAR_ONLY = frozenset({"listen", "max_connections", "connection_timeout"})


def _options(fn: Any) -> Any:
    for option in reversed(OPTIONS):
        if option.name in SIDECAR_ONLY or option.name.startswith("tls_"):
            continue  # the worker's own HTTP server serves /metrics, with Dask's TLS
        fn = click.option(option.flag, option.name, default=None, help=option.help)(fn)
    return fn


class _SharedArgv(click.Command):
    """A command that leaves unknown options to the other preloads: Dask's ``dask worker``
    parses a preload's argv in a bare ``click.Context``, which reads this attribute and
    not ``context_settings``."""

    ignore_unknown_options = True


@click.command(cls=_SharedArgv)
@_options
@click.argument("others", nargs=-1, type=click.UNPROCESSED)
def dask_setup(dask_worker: Any, others: tuple[str, ...] = (), **cli: Any) -> None:
    # Dask hands one flat preload_argv to every preload of a worker (dask-cuda adds
    # --create-cuda-context for its own): what is not ours is another preload's.
    if others:  # their values may be another preload's secrets: only the flags are named
        logger.info("dask-metrics: leaving %d argument(s) to the other preloads (%s)",
                    len(others), " ".join(a for a in others if a.startswith("-")) or "values")
    set_up(dask_worker, cli)


def set_up(worker: Any, cli: dict[str, Any], announce: bool = False) -> bool:
    """Sample and publish ``worker``'s GPUs, once per worker (a preload and a plugin may both
    ask); False where it was set up already. ``announce``: send the identity to the
    scheduler now, for a worker that registered before (its startup_information went
    without it)."""
    if id(worker) in _set_up:
        return False
    _set_up.add(id(worker))
    try:
        _setup(worker, cli, announce)
    except ConfigError as exc:
        logger.error("dask-metrics: bad option, GPU metrics disabled: %s", exc)
    except Exception:
        logger.exception("dask-metrics: GPU metrics disabled after an unexpected error")
    return True


def _setup(worker: Any, cli: dict[str, Any], announce: bool) -> None:
    config = resolve(cli, os.environ, dask.config.get(CONFIG_SECTION, default=None) or None,
                     origin=f"dask config {CONFIG_SECTION}")
    label = config.worker or worker_label(worker.name, worker.address)
    own = cluster_name.configured(config.dask_cluster)  # None: the scheduler's
    refusal = nvml_refusal(config)
    if refusal:
        # Publish who the worker is (a sidecar still wants its name and pid), with no GPU.
        logger.warning("dask-metrics: %s", refusal)
        identity = replace(_identity(worker, (), own), metrics_url=config.metrics_url or "")
        worker.startup_information[STARTUP_KEY] = lambda _w: identity.to_dict()
        _learn_cluster(worker, own, None, identity, config.worker_info_file)
        if announce:
            _announce(worker, identity.to_dict)
        return
    target = TargetSource(worker=label, gpus=config.gpus,
                          pids=frozenset({os.getpid(), *config.pids}), cluster=own)
    # no HTTP server of Dask's to see the scrapes of: the window stays --peak-window
    watched = config.serve_metrics and watch_scrapes(worker, _scrapes.scraped)
    sampler = make_sampler(config, target, scrapes=_scrapes if watched else None)
    first = sampler.sample_once()
    if not first.nvml_up:
        logger.warning("dask-metrics: %s; the worker runs on, NVML is retried in the "
                       "background", sampler.last_error)
    served = config.serve_metrics and _start(worker, sampler, config)
    if not served:
        sampler.stop()
    url = config.metrics_url or (dashboard_url(worker) if served else None)
    identity = replace(_identity(worker, tuple(g.ref for g in first.gpus), own),
                       metrics_url=url or "")
    worker.startup_information[STARTUP_KEY] = lambda _w: _current_identity(identity, sampler)
    _learn_cluster(worker, own, target, identity, config.worker_info_file)
    if announce:
        _announce(worker, lambda: _current_identity(identity, sampler))


def _learn_cluster(worker: Any, own: str | None, target: TargetSource | None,
                   identity: WorkerIdentity, info_file: str | None) -> None:
    """Write the worker-info file now (a sidecar wants the name and pid at once), and again
    with the dask_cluster value once the scheduler has said it, which the in-process
    series wait for too. A value of the worker's own is used at once, and a scheduler that
    says otherwise is logged as an error."""

    def publish(cluster: str | None) -> None:
        if info_file:
            write_info_file(info_file, replace(identity, cluster=cluster or ""))

    publish(own)

    async def ask() -> None:
        said = await scheduler_cluster(getattr(worker.scheduler, Handler.CLUSTER),
                                       worker.scheduler.address)
        if own is None:
            if target is not None:
                target.set_cluster(said)
            publish(said)
            logger.info("dask-metrics: this worker's series are labelled %s=%r",
                        DASK_CLUSTER, said)
        elif said != own:
            logger.error("dask-metrics: this worker's series are labelled %s=%r (its own "
                         "setting) but its scheduler's are %r: they will not show together; "
                         "remove the worker's setting or give both the same", DASK_CLUSTER,
                         own, said)

    task = asyncio.get_running_loop().create_task(ask())
    _learners[id(worker)] = task
    task.add_done_callback(lambda t: _learners.pop(id(worker), None)
                           if _learners.get(id(worker)) is t else None)


def _announce(worker: Any, identity: Callable[[], dict[str, Any]]) -> None:
    """Send the identity to the scheduler in the background; a scheduler that does not take
    it (no dask-metrics plugin) is logged, and the worker carries on."""

    async def send() -> None:
        try:
            await getattr(worker.scheduler, Handler.IDENTITY)(worker=worker.address,
                                                              identity=identity())
        except Exception as exc:  # the scheduler's answer, whatever it is: log and run on
            logger.warning("dask-metrics: the scheduler did not take this worker's GPUs: %s",
                           str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    task = asyncio.get_running_loop().create_task(send())
    _announcing.add(task)
    task.add_done_callback(_announcing.discard)


def nvml_refusal(config: ExporterConfig) -> str | None:
    """Why NVML must not be started in this worker, or None when it may be.

    Dask's own ``distributed.diagnostics.nvml: False`` keeps NVML out of the worker (a
    driver that misbehaves, NVML in forked processes): dask-metrics follows it unless its
    ``nvml`` option says otherwise. Simulated GPUs never touch NVML."""
    if config.simulate or config.nvml:
        return None
    if config.nvml is False:
        return (f"NVML not started ({CONFIG_SECTION} nvml is false): no GPU metrics from "
                "this worker")
    if dask.config.get(DASK_NVML, default=True):
        return None
    return (f"NVML not started because Dask's {DASK_NVML} is False: no GPU metrics from this "
            f"worker; to start it anyway give '--nvml true' after the preload, set "
            f"{ENV_PREFIX}NVML=true, or 'nvml: true' in the Dask config section {CONFIG_SECTION}")


def _identity(worker: Any, gpus: tuple[GpuRef, ...], own: str | None) -> WorkerIdentity:
    return WorkerIdentity(
        name=str(worker.name) if worker.name is not None else "",
        address=worker.address,
        pid=os.getpid(),
        host=socket.gethostname(),
        gpus=gpus,
        cluster=own or "",  # to the scheduler: the worker's own setting, for its check
    )


def _current_identity(identity: WorkerIdentity, sampler: Sampler) -> dict[str, Any]:
    gpus = tuple(g.ref for g in sampler.snapshot.gpus) or identity.gpus
    return replace(identity, gpus=gpus).to_dict()


def _start(worker: Any, sampler: Sampler, config: ExporterConfig) -> bool:
    """Sample and serve on the worker's /metrics; False where the series cannot be served."""
    if not _samplers:
        try:
            REGISTRY.register(_collector)
        except ValueError as exc:  # someone else already serves dask_gpu_* in this process
            logger.warning("dask-metrics: GPU series not served: %s", exc)
            return False
    _samplers[id(worker)] = sampler
    sampler.start()
    logger.info("dask-metrics: sampling %d GPU(s) every %g s for worker %s",
                len(sampler.snapshot.gpus), config.interval, sampler.snapshot.worker)
    return True


def dask_teardown(worker: Any) -> None:
    _set_up.discard(id(worker))
    learner = _learners.pop(id(worker), None)
    if learner is not None:
        learner.cancel()
    sampler = _samplers.pop(id(worker), None)
    if sampler is None:
        return
    sampler.stop()
    if not _samplers:
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(_collector)
