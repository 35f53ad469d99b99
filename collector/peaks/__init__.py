"""Peak GPU memory: when it happened, during which job, and how well it is known."""

from dask_metrics.collector.peaks.command import peaks
from dask_metrics.collector.peaks.peak import Peak

__all__ = ["Peak", "peaks"]
