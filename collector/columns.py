"""The metric columns of the CSV files: their names (as in the original dask-metrics), the
series each one reads, and the unit conversion from Prometheus' base units."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TOTAL_METRIC = "dask_gpu_memory_total_bytes"
USED_METRIC = "dask_gpu_memory_used_bytes"
PEAK_METRIC = "dask_gpu_memory_peak_bytes"
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
        return [None if r is None else round(r * scale, _DIGITS) for r in raw]


COLUMNS: tuple[Column, ...] = (
    Column("total-mem", USED_METRIC, "bytes used"),
    Column("mem-util", USED_METRIC, "% of capacity", per_total=True),
    Column("compute-util", "dask_gpu_utilization_ratio", "%", scale=100),
    Column("peak-mem", PEAK_METRIC, "bytes"),
    Column("mem-bw-util", "dask_gpu_memory_bandwidth_utilization_ratio", "%", scale=100),
    Column("power", "dask_gpu_power_watts", "W"),
    Column("temperature", "dask_gpu_temperature_celsius", "°C"),
    Column("sm-clock", "dask_gpu_sm_clock_hertz", "MHz", scale=1e-6),
    Column("energy", "dask_gpu_energy_joules_total", "J"),
)
NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


def select(names: Iterable[str] | None) -> tuple[Column, ...]:
    """The columns named (all when None), always in the canonical order above.

    Raises ValueError naming an unknown metric and the known ones.
    """
    if names is None:
        return COLUMNS
    wanted = set()
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown metric {name!r} (known: {', '.join(NAMES)})")
        wanted.add(name)
    if not wanted:
        raise ValueError(f"no metric given (known: {', '.join(NAMES)})")
    return tuple(c for c in COLUMNS if c.name in wanted)


def source_metrics(columns: Sequence[Column]) -> list[str]:
    """The Prometheus series the columns read, the total included when a ratio needs it."""
    metrics = dict.fromkeys(c.metric for c in columns)
    if any(c.per_total for c in columns):
        metrics[TOTAL_METRIC] = None
    return list(metrics)

