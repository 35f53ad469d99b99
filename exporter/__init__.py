"""dask-metrics exporter: NVML GPU gauges per Dask worker, and Dask job/DAG tracking."""
