"""One peak of GPU memory as every command reports it: its value, when and during which job,
whether it is exact or a bound and why, in words and in JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dask_metrics.collector.model.lifetimes import life, plain
from dask_metrics.collector.model.timespec import format_rfc3339


@dataclass(frozen=True, slots=True)  # slots: a report holds one per GPU and DAG
class Peak:
    """The peak of one GPU (or of one GPU during one job, with ``by="job"``).

    ``time`` (ms) is when the exporter sampled the peak (for an exporter that does not date
    its peaks, the first scrape that reported it: the spike happened within the peak window
    before); ``job``/``dag`` are what ran on that worker then (empty when idle), ``job_name``
    its job's name and ``phase`` how tables and plots call it (``etl · DAG 2``, see
    jobs.JobNames). ``upper_bytes``: None when the peak is exact (to the exporter's sampling
    interval), else how high it may have been — a larger value sampled just outside the range
    shares a peak window with part of it — or ``math.inf`` where part of the range lies in
    no peak window (exporter or Prometheus down, or a window shorter than the scrapes).
    When no sample is dated inside the range at all, ``peak_bytes`` is that upper bound
    (equal to ``upper_bytes``): the peak is at most this.
    """

    worker: str
    gpu: str
    uuid: str
    peak_bytes: float
    total_bytes: float | None
    time: int
    job: str
    dag: str
    job_name: str = ""
    phase: str = ""
    upper_bytes: float | None = None
    dated: bool = True  # False: an exporter that does not date its peaks, exactness unknown

    @property
    def exact(self) -> bool | None:
        """True when exact, False when a bound, None when the exporter cannot tell."""
        return self.upper_bytes is None if self.dated else None

    @property
    def peak_percent(self) -> float | None:
        if not self.total_bytes or math.isnan(self.peak_bytes):
            return None
        return round(self.peak_bytes / self.total_bytes * 100, 2)

    def caveat(self) -> str:
        """Why the peak is only a bound, in words; "" when it is exact."""
        if not self.dated:
            return ("the exporter does not date its peaks (an older one, without "
                    "dask_gpu_memory_peak_timestamp_seconds): a spike up to one peak window "
                    "before the range may be counted in it")
        if self.upper_bytes is None:
            return ""
        if math.isnan(self.peak_bytes):
            return ("no memory sample is dated inside the range and it lies in no peak "
                    "window (the exporter or Prometheus was down): the peak is unknown")
        if self.upper_bytes == self.peak_bytes:
            return ("no memory sample is dated inside the range (shorter than a scrape "
                    "interval): the peak is at most this, what the peak windows over it say")
        if math.isinf(self.upper_bytes):
            return ("part of the range lies in no peak window (the exporter or Prometheus "
                    "was down, or the peak window is shorter than the scrape interval): the "
                    "peak there is unknown")
        return (f"a larger value sampled just outside the range shares a peak window with "
                f"part of it: the peak may be up to {gib_text(self.upper_bytes)}")

    def to_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "gpu": _json_id(self.gpu), "uuid": self.uuid,
                "peak_bytes": _json_number(self.peak_bytes),
                "total_bytes": _json_number(self.total_bytes),
                "peak_percent": self.peak_percent, "time": format_rfc3339(self.time),
                "job": _json_id(plain(self.job)), "dag": _json_id(self.dag),
                "job_name": self.job_name or None, "scheduler_start": life(self.job) or None,
                "exact": self.exact,
                "upper_bound_bytes": (None if self.upper_bytes is None
                                      or math.isinf(self.upper_bytes)
                                      else _json_number(self.upper_bytes))}


def _json_id(value: str) -> int | str | None:
    return int(value) if value.isdigit() else (value or None)


def _json_number(value: float | None) -> float | int | None:
    if value is None or math.isnan(value):
        return None
    return int(value) if value.is_integer() else value


def gib_text(value: float | None) -> str:
    if value is None:
        return ""
    return "unknown" if math.isnan(value) else f"{value / 2**30:.2f} GiB"
