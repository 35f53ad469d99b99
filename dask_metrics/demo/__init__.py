"""The demo (``python -m dask_metrics.demo``) and the local stack it runs on, which the
end-to-end tests use too."""
