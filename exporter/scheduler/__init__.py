"""The scheduler preload (``dask scheduler --preload dask_metrics.scheduler``), by job:

- ``preload``: dask_setup/dask_teardown, the entry points Dask calls
- ``settings``: Settings from Dask config (defaults: ``exporter/scheduler.yaml``) and options
- ``plugin``: the SchedulerPlugin feeding a JobTracker from Dask's hooks
- ``handlers``: the monitor-session handlers clients call on the scheduler
- ``families``: the ``dask_job_*`` families of a scrape and their registry collectors
- ``serving``: the optional ``--metrics-port`` server
- ``dask_internals``: every use of Dask internals, with the versions each was checked on
"""
