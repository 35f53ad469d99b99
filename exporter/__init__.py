"""dask-metrics exporter: NVML GPU gauges per Dask worker, and Dask job/DAG tracking."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dask-metrics")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
