"""The original workflow on a cluster started without dask-metrics: the plugins a
``Monitor`` registers through Dask's plugin API where the scheduler has no dask-metrics.

From then on the cluster behaves as if started with both preloads, workers that join later
included (Dask gives them the worker plugins). Where the scheduler has the preload, nothing
is registered: its workers serve their GPUs as deployed (a sidecar, the worker preload).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import cloudpickle

from dask_metrics import __version__, plugins
from dask_metrics.collector.errors import CollectorError, MonitorError
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.sources.session_window import await_exporters
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import Handler

INSTALL = f"python -m pip install 'dask-metrics=={__version__}' (the wheel or checkout this " \
          "client uses)"


def has_scheduler_plugin(client: Any) -> bool:
    """Whether the scheduler runs dask-metrics' plugin (it answers the cluster's name)."""
    return isinstance(_answer(client, Handler.CLUSTER), str | dict)


def ensure(client: Any) -> bool:
    """Register the scheduler and worker plugins unless the scheduler has dask-metrics;
    True where they were registered now. A scheduler that cannot take them raises
    MonitorError with nothing registered; workers that cannot are named in a warning."""
    if has_scheduler_plugin(client):
        return False
    try:
        client.register_plugin(plugins.SchedulerInstaller(), name=plugins.SCHEDULER_PLUGIN)
    except Exception as exc:
        raise MonitorError(_scheduler_refusal(exc)) from None
    try:
        replies = client.sync(client.scheduler.register_worker_plugin, plugin=_by_value(
            plugins.WorkerInstaller()), name=plugins.WORKER_PLUGIN, idempotent=True)
    except Exception as exc:
        _undo_scheduler(client)
        raise MonitorError(f"the workers' dask-metrics plugin could not be registered "
                           f"({_first_line(exc)}): nothing was registered") from None
    _say_refusals({_labels(client).get(a, a): r for a, r in (replies or {}).items()})
    return True


def await_endpoints(client: Any, prometheus: Callable[[], PrometheusClient],
                    scope: Callable[[], Scope], t: float, patience: float) -> None:
    """Wait for Prometheus to scrape the workers' new GPU endpoints (registered at ``t``),
    where one is configured: a session started before would lose its first seconds."""
    try:
        prom = prometheus()
    except CollectorError:
        return  # none configured yet: start() needs none, the export will say
    with prom:
        await_exporters(prom, worker_labels(client), t, scope(), patience=patience,
                        warn=lambda m: warnings.warn(m, stacklevel=6))


def worker_labels(client: Any) -> list[str]:
    """The ``worker`` label of each of the cluster's workers: its name, else its address."""
    return sorted(_labels(client).values())


def _labels(client: Any) -> dict[str, str]:
    """{address: the worker label} of the cluster's workers."""
    workers = client.scheduler_info().get("workers", {})
    return {address: str(w.get("name")) if w.get("name") not in (None, "") else address
            for address, w in workers.items()}


def _answer(client: Any, handler: str) -> Any:
    try:
        return client.sync(getattr(client.scheduler, handler))
    except Exception:  # an unknown handler raises on some Dask versions, answers None on others
        return None


def _by_value(plugin: Any) -> bytes:
    """``plugin`` pickled with its class's code, so that a worker without dask-metrics can
    load it (and say so in its setup) instead of failing the registration of every one."""
    cloudpickle.register_pickle_by_value(plugins)
    try:
        return cloudpickle.dumps(plugin)
    finally:
        cloudpickle.unregister_pickle_by_value(plugins)


def _say_refusals(replies: dict[str, Any]) -> None:
    """One line for the workers (by label) without dask-metrics, one for those whose setup
    failed."""
    failed = {worker: str(reply.get("exception_text") or reply.get("exception") or "")
              for worker, reply in replies.items()
              if isinstance(reply, dict) and reply.get("status") == "error"}
    missing = sorted(w for w, text in failed.items() if plugins.MISSING in text)
    if missing:
        warnings.warn(f"{len(missing)} worker(s) serve no GPU series, dask-metrics is not "
                      f"installed there: {', '.join(missing)}; install it there: {INSTALL}",
                      stacklevel=4)
    other = sorted(w for w in failed if w not in missing)
    if other:
        warnings.warn(f"{len(other)} worker(s) refused dask-metrics' plugin: "
                      f"{', '.join(other)} ({_first_line(failed[other[0]])})", stacklevel=4)


def _scheduler_refusal(exc: BaseException) -> str:
    text = _first_line(exc)
    if isinstance(exc, ImportError) or "dask_metrics" in text:
        return (f"dask-metrics is not installed where the scheduler runs ({text}): install it "
                f"there, {INSTALL}, or start the scheduler with --preload "
                "dask_metrics.scheduler")
    return (f"the scheduler refused dask-metrics' plugin ({text}): start it with --preload "
            "dask_metrics.scheduler")


def _undo_scheduler(client: Any) -> None:
    """Take the scheduler plugin back after the workers' failed: nothing half-registered."""
    try:
        client.run_on_scheduler(plugins.uninstall)
        client.unregister_scheduler_plugin(plugins.SCHEDULER_PLUGIN)
    except Exception as exc:  # the error already raised says the rest; this is the cleanup's
        warnings.warn(f"dask-metrics' scheduler plugin could not be taken back: "
                      f"{_first_line(exc)}", stacklevel=4)


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
