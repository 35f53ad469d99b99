"""What the cluster page of ``collector plot`` draws of each worker, folded a piece of its
file at a time (pure, numpy): its GPUs' mean utilisation and total memory used as lines no
finer than a pixel column, and the spread of a fleet's workers (lowest, mean and highest per
pixel column), so that the page of a day of 1,000 workers holds a few arrays as wide as the
picture per worker shown, not their samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dask_metrics.collector.charts.layout import break_gaps, bucket_of, bucket_width, envelope
from dask_metrics.collector.charts.rows import stops_in, usual_interval
from dask_metrics.collector.model.tables import WorkerTable
from dask_metrics.collector.output.traces import Phase, WorkerTrace, worker_capacity

UTIL, MEMORY = "compute-util", "total-mem"  # averaged, and summed, over a worker's GPUs


@dataclass(frozen=True)
class Overview:
    """What the cluster picture draws of one worker: its GPUs' mean utilisation and total
    memory used (times, values: float arrays, NaN where a line breaks; None: no such column
    or the page shows the fleet's spread instead), its capacity and phases."""

    worker: str
    start: str
    devices: tuple[str, ...]  # its GPUs' UUIDs ("": unknown), one per GPU
    samples: int  # of all its GPUs
    last: float  # its last sample's time (seconds since the start)
    capacity: float | None
    util: tuple[Any, Any] | None
    memory: tuple[Any, Any] | None
    phases: list[Phase]
    cluster_phases: list[Phase]


class Line:
    """One overview line of a worker, folded piece by piece: its samples' envelope over
    ``buckets`` parts of [0, span] seconds, broken where samples stop (``stops_in``, across
    pieces too), and per part the sum, count, lowest and highest of its values."""

    def __init__(self, span: float, buckets: int) -> None:
        import numpy as np

        self.span, self.buckets = span, buckets
        self.times, self.values = np.empty(0), np.empty(0)
        self.last: int | None = None
        self.usual: float | None = None
        self.hole = False  # the last sample so far has no value
        self.total, self.count = np.zeros(buckets), np.zeros(buckets)
        self.low, self.high = np.full(buckets, np.inf), np.full(buckets, -np.inf)

    def add(self, times: Sequence[int], values: Sequence[float | None]) -> None:
        """The next piece's samples (times in ms, oldest first; None: no value)."""
        import numpy as np

        if not len(times):
            return
        stops = stops_in(times, self.last, self.usual)
        self.usual, self.last = usual_interval(times, self.usual), times[-1]
        t = np.asarray(times, dtype=float) / 1000
        v = np.array(values, dtype=float)  # None: NaN
        known = ~np.isnan(v)
        part = bucket_of(t[known], 0.0, bucket_width(0.0, self.span, self.buckets),
                         self.buckets)
        np.add.at(self.total, part, v[known])
        self.count += np.bincount(part, minlength=self.buckets)
        np.minimum.at(self.low, part, v[known])
        np.maximum.at(self.high, part, v[known])
        at = np.asarray(stops, dtype=float) / 1000
        where = np.searchsorted(t, at, side="right")
        t, v = np.insert(t, where, at), np.insert(v, where, np.nan)
        if self.hole:  # the pieces before ended without a value: their line ends there
            t, v = np.r_[t[:1], t], np.r_[np.nan, v]
        self.hole = bool(np.isnan(v[-1]))
        self.times, self.values = envelope(np.r_[self.times, t], np.r_[self.values, v],
                                           0.0, self.span, self.buckets)


@dataclass
class OverviewFold:
    """One worker's overview, folded a piece of its file at a time (``add``)."""

    span: float  # seconds the page's time axis shows
    buckets: int
    lines: dict[str, Line] = field(default_factory=dict)
    samples: int = 0  # of all its GPUs

    def add(self, table: WorkerTable, metrics: Sequence[str]) -> None:
        """A piece of the worker's rows (``metrics``: its column names)."""
        self.samples += table.rows
        for metric, average in ((UTIL, True), (MEMORY, False)):
            if metric in metrics:
                line = self.lines.setdefault(metric, Line(self.span, self.buckets))
                line.add(*combine(table, metrics.index(metric), average))

    def overview(self, trace: WorkerTrace, lines: bool = True) -> Overview:
        """The worker's overview; ``trace``: its rows a chart draws (for its phases and
        capacity), ``lines``: keep its two lines (False: the page shows the spread)."""
        def line(metric: str) -> tuple[Any, Any] | None:
            found = self.lines.get(metric)
            return (found.times, found.values) if found is not None and lines else None

        return Overview(trace.worker, trace.start, tuple(g.uuid for g in trace.gpus),
                        self.samples, max((g.times[-1] for g in trace.gpus if g.times),
                                          default=0.0),
                        worker_capacity(trace), line(UTIL), line(MEMORY), trace.phases,
                        trace.cluster_phases)


def combine(table: WorkerTable, column: int, average: bool
             ) -> tuple[list[int], list[float | None]]:
    """A column's values summed (or averaged) over the GPUs per sample time (GPUs without a
    value then are left out; None where none has one)."""
    import numpy as np

    pairs = [(g.times, g.columns[column]) for g in table.gpus if g.times]
    if not pairs:
        return [], []
    times = np.concatenate([np.asarray(t, dtype=np.int64) for t, _ in pairs])
    values = np.concatenate([np.array(c, dtype=float) for _, c in pairs])  # None: NaN
    found, slot = np.unique(times, return_inverse=True)
    known = ~np.isnan(values)
    total = np.bincount(slot, weights=np.where(known, values, 0.0), minlength=len(found))
    count = np.bincount(slot, weights=known, minlength=len(found))
    out = total / np.where(count > 0, count, 1) if average else total
    return found.tolist(), [x if n else None for x, n in zip(out.tolist(), count.tolist(),
                                                             strict=True)]


class Spread:
    """The workers' lines together per part of the page's time axis: the lowest and the
    highest value of any worker, and the mean over workers of each one's mean there (NaN
    where no worker has a sample), for a page of more workers than lines can tell apart."""

    def __init__(self, span: float, buckets: int) -> None:
        self.span, self.buckets = span, buckets
        self.parts: dict[str, list[Any]] = {}

    def add(self, fold: OverviewFold) -> None:
        import numpy as np

        for metric, line in fold.lines.items():
            low, high, total, workers = self.parts.setdefault(metric, [
                np.full(self.buckets, np.inf), np.full(self.buckets, -np.inf),
                np.zeros(self.buckets), np.zeros(self.buckets)])
            np.minimum(low, line.low, out=low)
            np.maximum(high, line.high, out=high)
            seen = line.count > 0
            total += np.where(seen, line.total / np.where(seen, line.count, 1), 0.0)
            workers += seen

    def of(self, metric: str) -> tuple[Any, Any, Any, Any] | None:
        """(times, lowest, mean, highest) at the middle of each part where a worker has a
        sample, a NaN row where samples stop for a while (``break_gaps`` on those parts:
        parts narrower than the sample interval are mostly empty, not stops); None when no
        worker has the metric."""
        import numpy as np

        if metric not in self.parts:
            return None
        low, high, total, workers = self.parts[metric]
        seen = workers > 0
        width = bucket_width(0.0, self.span, self.buckets)
        middle = ((np.flatnonzero(seen) + 0.5) * width).tolist()
        found = [break_gaps(middle, values[seen].tolist())
                 for values in (low, total / np.where(seen, workers, 1), high)]
        return (np.asarray(found[0][0]), *(np.asarray(v) for _, v in found))
