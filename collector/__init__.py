"""dask-metrics collector: per-worker GPU series from Prometheus, as CSV files and peaks.

The Python API (``export``, ``peaks``) is what the command line calls; ``Monitor`` keeps the
original dask-metrics workflow on top of the same functions.
"""

from dask_metrics.collector.monitor import Monitor

__all__ = ["Monitor"]
