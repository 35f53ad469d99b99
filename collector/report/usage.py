"""GPU use per job and DAG from the rows of an export (pure): what the session report adds
up. The rows are the export's own (``worker_table``), so every number on the report is
computed from exactly the samples a user finds in the CSV files.

Attribution: the interval between two consecutive samples of a GPU belongs to what its
worker ran at the later sample (its ``worker_job``/``worker_dag``, the as-of join of the
export); an interval longer than ``max_age`` is a gap and counts for nothing. In it:

- GPU seconds: its length; busy seconds: its length x the utilisation sampled at its end
  (the exporter's utilisation covers the period before the sample);
- idle seconds: its length when that utilisation is below ``IDLE_PERCENT``, while the worker
  held tasks of the job (dask_job_worker_tasks counts processing tasks: running or waiting);
- energy: the increase of the energy counter over it (an interval with a counter reset, or
  without both samples, adds nothing: the energy is then a lower bound).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dask_metrics.collector.series import WorkerTable

IDLE_PERCENT = 5.0
"""Utilisation (%) below which a GPU counts as idle."""
UTIL, ENERGY = "compute-util", "energy"

UsageKey = tuple[str, str, str, str]
"""(job, dag, gpu, uuid); job "" is the time the worker ran nothing."""


@dataclass
class Usage:
    """Sums over the intervals of one GPU attributed to one job/DAG (or to nothing)."""

    seconds: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    energy: float = 0.0
    energy_intervals: int = 0  # intervals with an energy increase measured
    first: int | None = None  # ms: start of the first interval
    last: int | None = None  # ms: end of the last one

    def add(self, other: Usage) -> None:
        self.seconds += other.seconds
        self.busy += other.busy
        self.idle += other.idle
        self.energy += other.energy
        self.energy_intervals += other.energy_intervals
        self.first = _min(self.first, other.first)
        self.last = _max(self.last, other.last)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def gpu_usage(table: WorkerTable, columns: Sequence[str], max_age: int
              ) -> dict[UsageKey, Usage]:
    """{(job, dag, gpu, uuid): Usage} of one worker's table (``columns``: its column names,
    in the table's order; ``compute-util`` in %, ``energy`` in J)."""
    util_at = columns.index(UTIL) if UTIL in columns else None
    energy_at = columns.index(ENERGY) if ENERGY in columns else None
    state_at = dict(zip(table.times, table.worker, strict=True))
    found: dict[UsageKey, Usage] = {}
    for g in table.gpus:
        utils = g.columns[util_at] if util_at is not None else [None] * len(g.times)
        energies = g.columns[energy_at] if energy_at is not None else [None] * len(g.times)
        for i in range(1, len(g.times)):
            t0, t1 = g.times[i - 1], g.times[i]
            if t1 - t0 > max_age:
                continue
            job, dag = state_at[t1]
            u = found.setdefault((job, dag, g.gpu, g.uuid), Usage())
            dt = (t1 - t0) / 1000
            u.seconds += dt
            util = utils[i]
            if util is not None and util == util:  # NaN: no reading
                u.busy += dt * util / 100
                if util < IDLE_PERCENT and job:
                    u.idle += dt
            e0, e1 = energies[i - 1], energies[i]
            if e0 is not None and e1 is not None and e1 >= e0:
                u.energy += e1 - e0
                u.energy_intervals += 1
            u.first = _min(u.first, t0)
            u.last = _max(u.last, t1)
    return found


def total(usages: Mapping[object, Usage]) -> Usage:
    out = Usage()
    for u in usages.values():
        out.add(u)
    return out
