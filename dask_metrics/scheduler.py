"""The scheduler preload: ``dask scheduler --preload dask_metrics.scheduler [--job-mode MODE]``.

Dask looks for ``dask_setup`` and ``dask_teardown`` in the module named by ``--preload``; the
plugin and the rest live in ``dask_metrics.exporter.scheduler``.
"""

from dask_metrics.exporter.scheduler.preload import dask_setup, dask_teardown

__all__ = ["dask_setup", "dask_teardown"]
