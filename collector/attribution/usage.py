"""GPU use per job and DAG from the rows of an export (pure): what the session report adds
up. The rows are the export's own (``worker_table``), so every number on the report is
computed from exactly the samples a user finds in the CSV files.

Attribution: the interval between two consecutive samples of a GPU belongs to what its
worker ran then: by the scheduler's own times where the preload exports them (an interval
in which that changed is split at the change, in proportion to time), else what the
worker ran at the later sample (its ``worker_job``/``worker_dag``, the as-of join of the
export); an interval longer than ``max_age`` is a gap and counts for nothing. In it:

- GPU seconds: its length; busy seconds: the increase of the exporter's busy-seconds
  counter over it (``dask_gpu_busy_seconds_total``: utilisation integrated over every
  internal sample, so exact whatever the scrape interval); where the counter is missing,
  its length x the utilisation sampled at its end;
- idle seconds: its length when its mean utilisation (busy / length) is below
  ``IDLE_PERCENT``, while the worker held tasks of the job (dask_job_worker_tasks counts
  processing tasks: running or waiting);
- energy: the increase of the energy counter over it (an interval without both samples
  adds nothing: the energy is then a lower bound);
- a counter that went back (its exporter restarted) counts from 0 there, as Prometheus'
  ``increase()`` does: its new value is the interval's increase, a lower bound (what was
  counted before the restart and not scraped is lost); such intervals are counted
  (``resets``) so that the figures can say so;
- SM and tensor activity (GPM, Hopper and newer): the increase of their exact-integral
  counters over it, and the seconds those increases cover (their mean is the one over the
  measured time);
- RMM: the largest bytes in use and pool size of the worker at the interval's end (its
  heartbeat's, as the scheduler last heard it: a sample, so the peak is a lower bound).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import sub
from typing import NamedTuple, TypeVar

from dask_metrics.collector.model.counters import rise, went_back
from dask_metrics.collector.model.series import Timeline
from dask_metrics.collector.model.tables import GpuKey, WorkerTable
from dask_metrics.collector.model.timeline import Changes

IDLE_PERCENT = 5.0
"""Utilisation (%) below which a GPU counts as idle."""
UTIL, ENERGY, BUSY = "compute-util", "energy", "busy-seconds"
SM, TENSOR = "sm-active-seconds", "tensor-active-seconds"
RMM_USED, RMM_POOL = "rmm-used", "rmm-pool"

_N = TypeVar("_N", int, float)
UsageKey = tuple[str, str, str, str]
"""(job, dag, gpu, uuid); job "" is the time the worker ran nothing."""


@dataclass(slots=True)  # slots: a report holds one per GPU and DAG
class Usage:
    """Sums over the intervals of one GPU attributed to one job/DAG (or to nothing)."""

    seconds: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    energy: float = 0.0
    energy_intervals: int = 0  # intervals with an energy increase measured
    first: int | None = None  # ms: start of the first interval
    last: int | None = None  # ms: end of the last one
    sm_active: float = 0.0  # SM-active seconds (GPM)
    sm_measured: float = 0.0  # seconds those cover
    tensor_active: float = 0.0
    tensor_measured: float = 0.0
    rmm_used: float | None = None  # bytes: the largest RMM use sampled
    rmm_pool: float | None = None  # bytes: the largest RMM pool sampled
    resets: int = 0  # intervals in which a counter went back (its exporter restarted)

    def add(self, other: Usage) -> None:
        self.seconds += other.seconds
        self.busy += other.busy
        self.idle += other.idle
        self.energy += other.energy
        self.energy_intervals += other.energy_intervals
        self.resets += other.resets
        self.first = smaller(self.first, other.first)
        self.last = larger(self.last, other.last)
        self.sm_active += other.sm_active
        self.sm_measured += other.sm_measured
        self.tensor_active += other.tensor_active
        self.tensor_measured += other.tensor_measured
        self.rmm_used = larger(self.rmm_used, other.rmm_used)
        self.rmm_pool = larger(self.rmm_pool, other.rmm_pool)


def smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def larger(a: _N | None, b: _N | None) -> _N | None:
    return b if a is None else a if b is None else max(a, b)


Row = tuple[int, list[float | None], tuple[str, str]]
"""A GPU's row: its time, its values (in the table's column order), the worker's state."""


def last_rows(table: WorkerTable) -> dict[GpuKey, Row]:
    """Each GPU's last row: where its next piece's first interval starts."""
    state_at = dict(zip(table.times, table.worker, strict=True))
    return {(g.gpu, g.uuid): (g.times[-1], [c[-1] for c in g.columns], state_at[g.times[-1]])
            for g in table.gpus if g.times}


def gpu_usage(table: WorkerTable, columns: Sequence[str], max_age: int,
              activity: Timeline | None = None, before: Mapping[GpuKey, Row] | None = None
              ) -> dict[UsageKey, Usage]:
    """{(job, dag, gpu, uuid): Usage} of one worker's table (``columns``: its column names,
    in the table's order; ``compute-util`` in %, ``energy`` in J). ``before``: the GPUs'
    last rows before the table's (``last_rows`` of the piece before it), whose intervals to
    the table's first rows are the table's: a range read in pieces adds up to the whole.

    With an ``exact`` ``activity`` (the scheduler's own times, see ``model.timeline``) an interval
    belongs to what ran from its start on, and one in which that changed is split at the
    changes: each part takes its share of the interval's counter increases in proportion
    to its time (exact where the GPU's use was even over the interval). Otherwise an
    interval belongs to the state at its end (the table's ``worker``).

    Works run by run (consecutive intervals of one state), each run's sums taken over whole
    slices: an export has millions of intervals, and a Python step per interval was most of
    a report's time."""
    at = {name: columns.index(name) for name in (UTIL, ENERGY, BUSY, SM, TENSOR, RMM_USED,
                                                 RMM_POOL) if name in columns}
    exact = activity is not None and activity.exact
    changes = Changes.of(activity) if exact else Changes([], [])
    found: dict[UsageKey, Usage] = {}
    for g in table.gpus:
        times = g.times
        if times == table.times:
            states = table.worker
        else:
            state_at = dict(zip(table.times, table.worker, strict=True))
            states = [state_at[t] for t in times]
        values = g.columns
        if before and (row := before.get((g.gpu, g.uuid))) is not None:
            times, states = [row[0], *times], [row[2], *states]
            values = [[v, *col] for v, col in zip(row[1], values, strict=True)]
        cols = _Columns(*(values[at[n]] if n in at else None
                          for n in (UTIL, ENERGY, BUSY, SM, TENSOR, RMM_USED, RMM_POOL)))
        split: list[int] = []
        if exact:  # interval i (ending at times[i]) ran what ran at its start
            split = changes.straddled(times)
            states = [None, *states[:-1]]
            for i in split:
                states[i] = None
        cuts = [i for i in range(2, len(times)) if states[i] != states[i - 1]]
        for lo, hi in zip([1, *cuts], [*cuts, len(times)], strict=True):
            if lo >= hi or states[lo] is None:
                continue
            job, dag = states[lo]
            _add_run(found, (job, dag, g.gpu, g.uuid), times, cols, lo, hi, max_age)
        for i in split:
            for (job, dag), part in _parts(times, cols, i, changes, max_age):
                if not job:
                    part.idle = 0.0  # idle counts while a job holds the worker
                found.setdefault((job, dag, g.gpu, g.uuid), Usage()).add(part)
    return found


def _parts(times: Sequence[int], cols: _Columns, i: int, changes: Changes, max_age: int
           ) -> list[tuple[tuple[str, str], Usage]]:
    """Interval i cut at the changes inside it: (state, its share) per part."""
    t0, t1 = times[i - 1], times[i]
    if t1 - t0 > max_age:
        return []
    rises = {name: _rise(col, i) for name, col in
             ((BUSY, cols.busy), (ENERGY, cols.energies), (SM, cols.sm), (TENSOR, cols.tensor))}
    whole = share(rises, cols.utils[i] if cols.utils is not None else None, t0, t1, t0, t1)
    whole.resets = int(any(went_back(c[i - 1], c[i]) for c in (cols.busy, cols.energies)
                           if c is not None))
    whole.rmm_used = cols.rmm_used[i] if cols.rmm_used is not None else None
    whole.rmm_pool = cols.rmm_pool[i] if cols.rmm_pool is not None else None
    return split(whole, changes)


def split(part: Usage, changes: Changes) -> list[tuple[tuple[str, str], Usage]]:
    """``part`` (over [first, last]) cut at the ``changes`` inside it, each piece with its
    share of the sums in proportion to its time. The samples at the end (RMM) are the last
    piece's."""
    a, b = part.first, part.last
    if a is None or b is None or b <= a:
        return [(changes.at(a if a is not None else 0), part)]
    out = []
    for state, x, y in changes.pieces(a, b):
        f = (y - x) / (b - a)
        piece = Usage(part.seconds * f, part.busy * f, part.idle * f, part.energy * f,
                      part.energy_intervals, x, y, part.sm_active * f, part.sm_measured * f,
                      part.tensor_active * f, part.tensor_measured * f)
        piece.resets = part.resets
        if y == b:
            piece.rmm_used, piece.rmm_pool = part.rmm_used, part.rmm_pool
        out.append((state, piece))
    return out


def attribute(part: Usage, t: int, activity: Timeline, max_age: int
              ) -> list[tuple[tuple[str, str], Usage]]:
    """What ran during ``part``: with an exact timeline, ``split`` at its changes; else the
    state at ``t``."""
    if not activity.exact:
        return [(activity.at(t, max_age), part)]
    changes = Changes.of(activity)
    return split(part, changes) if part.first is not None else [(changes.at(t), part)]


def _rise(col: _Column, i: int) -> float | None:
    return None if col is None else rise(col[i - 1], col[i])


_Column = Sequence[float | None] | None  # None: the export has not the column


class _Columns(NamedTuple):
    """One GPU's columns that usage reads."""

    utils: _Column
    energies: _Column
    busy: _Column
    sm: _Column
    tensor: _Column
    rmm_used: _Column
    rmm_pool: _Column


def _add_run(found: dict[UsageKey, Usage], key: UsageKey, times: Sequence[int],
             cols: _Columns, lo: int, hi: int, max_age: int) -> None:
    """Add the intervals ending at lo..hi-1 (gaps longer than ``max_age`` left out)."""
    dts = list(map(sub, times[lo:hi], times[lo - 1:hi - 1]))
    if max(dts) > max_age:
        dts = [d if d <= max_age else 0 for d in dts]
    if not any(dts):
        return
    u = found.setdefault(key, Usage())
    u.seconds += sum(dts) / 1000
    # busy seconds of each interval: the counter's increase, else utilisation x length
    busies = counted = _increases(dts, cols.busy, lo, hi)
    if None in counted:
        utils = cols.utils[lo:hi] if cols.utils is not None else [None] * len(dts)
        us = [x if x is not None and x == x else None for x in utils]  # NaN: none
        busies = [c if c is not None else (d * x / 100_000 if x is not None else None)
                  for d, c, x in zip(dts, counted, us, strict=True)]
    u.busy += sum(b for b in busies if b is not None)
    if key[0]:  # a job ran
        u.idle += sum(d for d, b in zip(dts, busies, strict=True)
                      if d and b is not None and b * 100_000 < IDLE_PERCENT * d) / 1000
    rises = [] if cols.energies is None else [
        r for r in _increases(dts, cols.energies, lo, hi) if r is not None]
    u.energy += sum(rises)
    u.energy_intervals += len(rises)
    u.resets += _resets(dts, (cols.busy, cols.energies), lo, hi)
    active, measured = _integral(dts, cols.sm, lo, hi)
    u.sm_active += active
    u.sm_measured += measured
    active, measured = _integral(dts, cols.tensor, lo, hi)
    u.tensor_active += active
    u.tensor_measured += measured
    if cols.rmm_used is not None:
        u.rmm_used = larger(u.rmm_used, _largest(cols.rmm_used[lo:hi]))
    if cols.rmm_pool is not None:
        u.rmm_pool = larger(u.rmm_pool, _largest(cols.rmm_pool[lo:hi]))
    first = next(i for i, d in enumerate(dts) if d)
    last = next(i for i in range(len(dts) - 1, -1, -1) if dts[i])
    u.first = smaller(u.first, times[lo + first - 1])
    u.last = larger(u.last, times[lo + last])


def _increases(dts: Sequence[int], counter: _Column, lo: int, hi: int
               ) -> list[float | None]:
    """A counter's increase over each interval ending at lo..hi-1 (``rise``); None where the
    interval is a gap, a sample is missing or NaN, or the export has no such counter."""
    if counter is None:
        return [None] * len(dts)
    return [rise(c0, c1) if d else None
            for d, c0, c1 in zip(dts, counter[lo - 1:hi - 1], counter[lo:hi], strict=True)]


def _resets(dts: Sequence[int], counters: Sequence[_Column], lo: int, hi: int) -> int:
    """The intervals ending at lo..hi-1 (gaps left out) in which one of ``counters`` went
    back."""
    backs = [any(went_back(c[k - 1], c[k]) for c in counters if c is not None)
             for k in range(lo, hi)]
    return sum(1 for d, back in zip(dts, backs, strict=True) if d and back)


def _integral(dts: Sequence[int], counter: _Column, lo: int, hi: int
              ) -> tuple[float, float]:
    """A seconds counter's increase over the intervals ending at lo..hi-1, and the seconds
    of the intervals it was measured over."""
    if counter is None:
        return 0.0, 0.0
    rises = _increases(dts, counter, lo, hi)
    return (sum(r for r in rises if r is not None),
            sum(d for d, r in zip(dts, rises, strict=True) if r is not None) / 1000)


def share(rises: Mapping[str, float | None], util: float | None, t0: int, t1: int, a: int,
           b: int) -> Usage:
    """The part [a, b] of the interval (t0, t1]: its time, and each counter's increase over
    the interval (``rises``; None: not measured) in proportion to that time. Busy seconds
    without a counter: ``util`` (%, sampled at t1) x the part's time."""
    u = Usage()
    share = (b - a) / (t1 - t0)
    u.seconds, u.first, u.last = (b - a) / 1000, a, b
    busy = rises.get(BUSY)
    if busy is None and util is not None and util == util:
        busy = util * (t1 - t0) / 100_000
    if busy is not None:
        u.busy = busy * share
        if busy * 100_000 < IDLE_PERCENT * (t1 - t0):
            u.idle = u.seconds
    if (energy := rises.get(ENERGY)) is not None:
        u.energy, u.energy_intervals = energy * share, 1
    if (sm := rises.get(SM)) is not None:
        u.sm_active, u.sm_measured = sm * share, u.seconds
    if (tensor := rises.get(TENSOR)) is not None:
        u.tensor_active, u.tensor_measured = tensor * share, u.seconds
    return u


def _largest(values: Sequence[float | None]) -> float | None:
    return max((v for v in values if v is not None and v == v), default=None)


def total(usages: Mapping[object, Usage]) -> Usage:
    out = Usage()
    for u in usages.values():
        out.add(u)
    return out
