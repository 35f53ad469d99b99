"""The collector's data, pure: times, series, per-GPU tables, jobs and scheduler lives."""
