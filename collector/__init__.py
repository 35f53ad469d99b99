"""dask-metrics collector: per-worker GPU series from Prometheus, as CSV files and peaks.

The Python API (``export``, ``peaks``) is what the command line calls; ``Monitor`` keeps the
original dask-metrics workflow on top of the same functions.
"""

from collector.monitor import Monitor
from exporter import __version__

__all__ = ["Monitor", "__version__"]
