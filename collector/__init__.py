"""dask-metrics collector: per-worker GPU series from Prometheus, as CSV files and peaks.

The Python API is what the command line calls: ``export``, ``peaks`` (in ``peaks``),
``PrometheusClient`` and ``ConnectionSettings``; ``Monitor`` keeps the original dask-metrics
workflow on top of them. Each is imported on first use, so that a room's module loads only
the rooms below it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask_metrics.collector.monitor.monitor import Monitor
    from dask_metrics.collector.output.export import export
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient

_API = {
    "ConnectionSettings": "dask_metrics.collector.store.client",
    "Monitor": "dask_metrics.collector.monitor.monitor",
    "PrometheusClient": "dask_metrics.collector.store.client",
    "export": "dask_metrics.collector.output.export",
}
__all__ = ["ConnectionSettings", "Monitor", "PrometheusClient", "export"]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
