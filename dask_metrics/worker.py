"""The worker preload: ``dask worker --preload dask_metrics.worker [--serve-metrics …]``.

Dask looks for ``dask_setup`` and ``dask_teardown`` in the module named by ``--preload``; the
GPU sampling it starts lives in ``dask_metrics.exporter.worker``.
"""

from dask_metrics.exporter.worker import dask_setup, dask_teardown

__all__ = ["dask_setup", "dask_teardown"]
