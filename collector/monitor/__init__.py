"""The original dask-metrics workflow: Monitor, its sessions, and the watcher."""
