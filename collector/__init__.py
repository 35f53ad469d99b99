"""dask-metrics collector: per-worker GPU series from Prometheus, as CSV files and peaks.

The Python API (``export``, ``peaks``) is what the command line calls; a ``Monitor`` class
will call the same functions.
"""

from exporter import __version__

__all__ = ["__version__"]
