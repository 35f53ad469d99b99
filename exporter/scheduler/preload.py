"""The preload's entry points, which Dask calls for ``--preload dask_metrics.scheduler``:
``dask_setup`` (a click command, so the preload takes options) and ``dask_teardown``."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
from typing import Any

import click

from dask_metrics.contract import CLUSTER_CONFIG, CLUSTER_ENV, CLUSTER_OPTION
from dask_metrics.exporter.scheduler.plugin import PLUGIN_NAME, JobPlugin
from dask_metrics.exporter.scheduler.settings import SETTINGS, Settings

logger = logging.getLogger(__name__)
EXIT_BAD_SETTING = 2  # the scheduler command's exit status after a bad setting stopped it


_SET = {o.name: o for o in SETTINGS}  # the options below are declared there


def _options(fn: Any) -> Any:
    """The preload's options, as SETTINGS declares them, and --dask-cluster."""
    fn = click.option(
        CLUSTER_OPTION, "cluster", default=None,
        help=f"the dask_cluster label of every series (default: {CLUSTER_ENV}, else config "
        f"{CLUSTER_CONFIG}, else derived: the DaskCluster or Helm release name on Kubernetes, "
        "else <host>-<scheduler port>)")(fn)
    for name, kind in reversed(_CLI):
        setting = _SET[name]
        kind = click.Choice(list(setting.choices)) if setting.choices else kind
        fn = click.option(setting.flag, name, type=kind, default=None, help=setting.help)(fn)
    return fn


# The settings the preload takes as options (the others: Dask config), with their types.
_CLI = (("job_mode", str), ("prometheus_url", str), ("prometheus", str),
        ("local_prometheus_dir", str), ("local_prometheus_port", int), ("metrics_port", int),
        ("metrics_address", str))


@click.command()
@_options
def dask_setup(scheduler: Any, **options: Any) -> None:
    """Add the plugin to the scheduler (once: a second preload of it is ignored)."""
    try:
        install(scheduler, **options)
    except (ValueError, TypeError, OSError) as exc:
        _stop(scheduler, exc)


def install(scheduler: Any, **options: Any) -> bool:
    """Add the plugin with ``options`` over the Dask config; False where it is there already.
    A bad setting raises (ValueError, TypeError, OSError) with nothing added."""
    if PLUGIN_NAME in scheduler.plugins:
        logger.warning(
            "dask-metrics: the scheduler already has %s; not adding it twice", PLUGIN_NAME
        )
        return False
    settings = Settings.from_config(**options)
    plugin = JobPlugin(settings)
    plugin.attach(scheduler)
    scheduler.add_plugin(plugin, name=PLUGIN_NAME)
    logger.info("dask-metrics: tracking jobs and DAGs, job mode %s, dask_cluster %r (%s)",
                settings.job_mode.value, plugin.cluster,
                "set" if settings.cluster else "derived")
    return True


def _stop(scheduler: Any, exc: BaseException) -> None:
    """A bad setting stops the scheduler, with one line saying which and why: Dask would
    only log the traceback and run on without the plugin, and a cluster that looks
    monitored but exports no jobs loses every session in silence."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, ValueError):
        reason = f"--metrics-port/--metrics-address: cannot listen ({exc.strerror or reason})"
    logger.error("dask-metrics: %s; stopping the scheduler rather than running it without "
                 "job tracking (fix the setting, or remove --preload dask_metrics.scheduler)",
                 reason)
    asyncio.get_running_loop().call_soon(
        lambda: asyncio.ensure_future(scheduler.close(reason="dask-metrics-bad-setting")))
    if _scheduler_command():
        atexit.register(_exit_failed)


def _scheduler_command() -> bool:
    """Whether this process is Dask's scheduler command (``dask scheduler``, ``python -m
    dask scheduler``, ``dask-scheduler``), whose exit status a supervisor or batch system
    reads; not a program that runs a scheduler in-process (a notebook), which must live on."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = spec.name if spec is not None else ""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if module == "distributed.cli.dask_scheduler" or program == "dask-scheduler":
        return True
    return (module == "dask.__main__" or program == "dask") and sys.argv[1:2] == ["scheduler"]


def _exit_failed() -> None:
    """At exit, after the scheduler closed: exit non-zero (Dask's command would exit 0)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(EXIT_BAD_SETTING)


async def dask_teardown(scheduler: Any) -> None:
    """Undo dask_setup: the plugin's series, handlers and hooks leave with it."""
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    if isinstance(plugin, JobPlugin):
        await plugin.close()
        scheduler.remove_plugin(name=PLUGIN_NAME)
