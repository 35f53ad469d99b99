"""The metric columns of the CSV files: their names (as in the original dask-metrics), the
series each one reads, and the unit conversion from Prometheus' base units."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dask_metrics import contract

TOTAL_METRIC = contract.MEMORY_TOTAL.name
USED_METRIC = contract.MEMORY_USED.name
PEAK_METRIC = contract.MEMORY_PEAK.name
PEAK_TIME_METRIC = contract.MEMORY_PEAK_TIME.name
NEXT_PEAK_METRIC = contract.MEMORY_NEXT_PEAK.name
NEXT_PEAK_TIME_METRIC = contract.MEMORY_NEXT_PEAK_TIME.name
SAMPLES_METRIC = contract.EXPORTER_SAMPLES.name  # the exporter's rounds: how long it has run
ROUND_TIME_METRIC = contract.EXPORTER_LAST_SAMPLE.name  # when the scraped round was sampled
WINDOW_METRIC = contract.EXPORTER_PEAK_WINDOW.name  # how far back each scrape's peak reaches
# Derived values are rounded so that 0.29 * 100 reads 29, not 28.999999999999996.
_DIGITS = 6


@dataclass(frozen=True)
class Column:
    """A CSV column: ``values`` turns raw samples (and the same scrapes' totals) into its unit."""

    name: str
    metric: str
    unit: str
    scale: float = 1.0
    per_total: bool = False
    per_worker: bool = False  # a worker's series (no gpu label), joined as-of to its GPU rows

    def values(self, raw: Sequence[float | None], totals: Sequence[float | None]
               ) -> list[float | None]:
        """The column's values from aligned lists (None: no sample); a whole column at a time,
        since a call per value was a large share of an export's time."""
        if self.per_total:
            return [None if r is None or not t else round(r / t * 100, _DIGITS)
                    for r, t in zip(raw, totals, strict=True)]
        if self.scale == 1:
            return list(raw)
        scale = self.scale
        # The decoder makes one float object per distinct value of an answer, and gauges such
        # as utilisation take few values: each object is then scaled once (round is slow).
        done = dict(zip(map(id, raw), raw, strict=True))
        if len(done) * 2 > len(raw):
            return [None if r is None else round(r * scale, _DIGITS) for r in raw]
        for key, r in done.items():
            done[key] = None if r is None else round(r * scale, _DIGITS)
        return list(map(done.__getitem__, map(id, raw)))


# Names and series from the contract; here only the unit each column shows.
_UNITS: dict[str, tuple[str, float, bool]] = {  # name: (unit, scale, per_total)
    "total-mem": ("bytes used", 1.0, False),
    "mem-util": ("% of capacity", 1.0, True),
    "compute-util": ("%", 100.0, False),
    "peak-mem": ("bytes", 1.0, False),
    "mem-bw-util": ("%", 100.0, False),
    "power": ("W", 1.0, False),
    "temperature": ("°C", 1.0, False),
    "sm-clock": ("MHz", 1e-6, False),
    "energy": ("J", 1.0, False),
    "busy-seconds": ("s", 1.0, False),
    "sm-active-seconds": ("s", 1.0, False),
    "tensor-active-seconds": ("s", 1.0, False),
    "sm-active": ("%", 100.0, False),
    "sm-occupancy": ("%", 100.0, False),
    "tensor-active": ("%", 100.0, False),
    "dram-active": ("%", 100.0, False),
    "fp64-active": ("%", 100.0, False),
    "fp32-active": ("%", 100.0, False),
    "fp16-active": ("%", 100.0, False),
    "worker-mem": ("bytes", 1.0, False),
    "worker-spilled": ("bytes", 1.0, False),
    "worker-cpu": ("% of one core", 100.0, False),  # 100 = one core busy, as top shows
    "worker-tasks": ("tasks", 1.0, False),
    "rmm-used": ("bytes", 1.0, False),
    "rmm-pool": ("bytes", 1.0, False),
}
GPU_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, metric, *_UNITS[name]) for name, metric in contract.CSV_METRICS.items()
)
ACTIVITY_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, metric, *_UNITS[name]) for name, metric in contract.ACTIVITY_CSV_METRICS.items()
)
COUNTER_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, metric, *_UNITS[name]) for name, metric in contract.COUNTER_CSV_METRICS.items()
)
WORKER_COLUMNS: tuple[Column, ...] = tuple(
    Column(name, metric, *_UNITS[name], per_worker=True)
    for name, metric in contract.WORKER_CSV_METRICS.items()
)
COLUMNS: tuple[Column, ...] = GPU_COLUMNS + ACTIVITY_COLUMNS + COUNTER_COLUMNS + WORKER_COLUMNS
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
# What an export writes when no column is named: the GPU columns, so that the files of the
# original workflow keep their columns; the counters' and the worker's are asked for by name.
DEFAULT_NAMES: tuple[str, ...] = tuple(c.name for c in GPU_COLUMNS)
# Added to the default columns where their series have data in the export's range: GPM
# activity (Hopper and newer GPUs) and RMM (RAPIDS workers); absent, they would be empty.
WHEN_PRESENT: tuple[Column, ...] = ACTIVITY_COLUMNS + tuple(
    c for c in WORKER_COLUMNS if c.name in ("rmm-used", "rmm-pool"))


def is_default(names: Sequence[str] | None) -> bool:
    """Whether ``names`` asks for the default columns (None, or exactly those: a monitor
    session records the default by name)."""
    return names is None or set(names) == set(DEFAULT_NAMES)


def select(names: Iterable[str] | None) -> tuple[Column, ...]:
    """The columns named (DEFAULT_NAMES when None), always in the canonical order above.

    Raises ValueError naming an unknown metric and the known ones.
    """
    if names is None:
        return GPU_COLUMNS
    wanted = set()
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown metric {name!r} (known: {', '.join(NAMES)})")
        wanted.add(name)
    if not wanted:
        raise ValueError(f"no metric given (known: {', '.join(NAMES)})")
    return tuple(c for c in COLUMNS if c.name in wanted)


def source_metrics(columns: Sequence[Column]) -> list[str]:
    """The per-GPU series the columns read, the total included when a ratio needs it; memory
    used when only worker columns are chosen, since the rows are the GPU samples."""
    metrics = dict.fromkeys(c.metric for c in columns if not c.per_worker)
    if any(c.per_total for c in columns):
        metrics[TOTAL_METRIC] = None
    return list(metrics) or [USED_METRIC]


def worker_metrics(columns: Sequence[Column]) -> list[str]:
    """The worker series (one per worker, from the scheduler preload) the columns read."""
    return list(dict.fromkeys(c.metric for c in columns if c.per_worker))

