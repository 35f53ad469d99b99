"""dask-metrics: GPU metrics for Dask clusters, the Prometheus way.

The one import package. Its parts, each a folder of the repository (the mapping is in
pyproject.toml's ``[tool.setuptools.package-dir]``):

- ``dask_metrics.exporter`` (``exporter/``): the NVML sampler, the sidecar exporter and the
  worker and scheduler preloads' machinery;
- ``dask_metrics.collector`` (``collector/``): the Prometheus client, CSV export, peaks, plots,
  ``Monitor`` and the ``collector`` command;
- ``dask_metrics.demo`` (``dask_metrics/demo/``): the local stack and the demo;
- ``dask_metrics.contract``: the names every part shares;
- ``dask_metrics.scheduler`` and ``dask_metrics.worker``: the preloads
  (``dask scheduler --preload dask_metrics.scheduler``,
  ``dask worker --preload dask_metrics.worker``).

``from dask_metrics import Monitor`` is the original dask-metrics workflow; it is imported on
first use, so the sidecar and the preloads do not load the collector.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("dask-metrics")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from dask_metrics.collector.monitor.monitor import Monitor

__all__ = ["Monitor", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Monitor":
        from dask_metrics.collector.monitor.monitor import Monitor

        return Monitor
    raise AttributeError(f"module 'dask_metrics' has no attribute {name!r}")
