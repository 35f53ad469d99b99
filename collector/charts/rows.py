"""The rows of a worker's table that its chart draws (pure): a long range read in pieces keeps,
for the workers it may chart, each piece's table thinned to those rows, so that what a chart
holds is bounded by its width, not by the range.

A chart draws each series as its envelope per pixel column (``layout.envelope``): the
lowest and the highest sample of each column, a line broken where values are missing or
samples stop, and the job/DAG phases. Kept: in each of ``buckets`` equal parts of the range
(more than the chart's columns), per GPU the first and the last row and those with the lowest
and the highest value of each drawn column; the rows on both sides of a value that appears
or vanishes and of a change of what ran on the worker or the cluster; each GPU's first row
that tells its capacity. Kept rows are far apart where the samples are not, so the stops in
the samples (``layout.break_gaps``: longer than GAP_FACTOR times the GPU's usual
interval in the piece, or the piece before's where it has few) are found before thinning
and marked by a row without values (the table is ``thinned``: a chart finds no stops of its
own in it). The picture is the whole table's up to a pixel column."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

from dask_metrics.collector.charts.layout import GAP_FACTOR, bucket_of
from dask_metrics.collector.model.tables import GpuKey, GpuTable, WorkerTable

CHART_BUCKETS = 2048
"""Parts of the range thinned alike: over twice the chart's pixel columns (chart.WIDTH)."""
DRAWN = ("compute-util", "mem-bw-util", "total-mem", "peak-mem")
CAPACITY = ("total-mem", "mem-util")  # a row with both tells the GPU's capacity
FEW = 16  # intervals of a piece that tell its usual one; fewer: the piece before's


def chart_rows(table: WorkerTable, columns: Sequence[str], lo: int, hi: int,
               before: Carried | None = None, buckets: int = CHART_BUCKETS) -> WorkerTable:
    """The rows of ``table`` (``columns``: its column names) a chart of [lo, hi] (ms)
    draws; ``before``: ``carried`` of the pieces before (a stop in the samples across the
    pieces' edge is this piece's)."""
    import numpy as np

    state_at = dict(zip(table.times, table.worker, strict=True))
    cluster_at = dict(zip(table.times, table.cluster, strict=True))
    # what ran at each of the table's times, numbered: a change is where the number does
    states: dict[tuple[tuple[str, str], tuple[str, str]], int] = {}
    ran = np.array([states.setdefault(s, len(states))
                    for s in zip(table.worker, table.cluster, strict=True)], dtype=np.int64)
    stamps = np.asarray(table.times, dtype=np.int64)
    width = max(hi - lo, 1) / buckets
    gpus: list[GpuTable] = []
    stops: dict[GpuKey, list[int]] = {}
    for g in table.gpus:
        n = len(g.times)
        if not n:
            continue
        times = np.asarray(g.times, dtype=float)
        where = bucket_of(times, lo, width, buckets)
        edge = np.flatnonzero(where[1:] != where[:-1])
        keep = [np.r_[0, edge, edge + 1, n - 1]]
        values = {name: np.array(g.columns[k], dtype=float)  # None: NaN
                  for k, name in enumerate(columns) if name in DRAWN or name in CAPACITY}
        for name, v in values.items():
            known = ~np.isnan(v)
            turn = np.flatnonzero(known[1:] != known[:-1])
            keep.append(np.r_[turn, turn + 1])
            if name not in DRAWN:
                continue
            at = np.flatnonzero(known)
            if not len(at):
                continue
            order = at[np.lexsort((v[at], where[at]))]  # by bucket, then value
            part = where[order]
            first = np.flatnonzero(np.r_[True, part[1:] != part[:-1]])
            keep.append(order[np.r_[first, np.r_[first[1:], len(order)] - 1]])
        if all(name in values for name in CAPACITY):
            used, percent = values[CAPACITY[0]], values[CAPACITY[1]]
            told = np.flatnonzero(~np.isnan(used) & ~np.isnan(percent) & (percent != 0))
            keep.append(told[:1])
        mine = ran[np.searchsorted(stamps, g.times)]  # a GPU's times are among the table's
        changes = np.flatnonzero(mine[1:] != mine[:-1])
        keep.append(np.r_[changes, changes + 1])
        stops[g.gpu, g.uuid] = stops_in(g.times, *(before or {}).get((g.gpu, g.uuid),
                                                                    (None, None)))
        rows = np.unique(np.concatenate(keep)).tolist()
        gpus.append(GpuTable(g.gpu, g.uuid, [g.times[i] for i in rows],
                             [[col[i] for i in rows] for col in g.columns]))
    gpus = [_marked(g, stops[g.gpu, g.uuid]) for g in gpus]
    times = sorted({t for g in gpus for t in g.times})
    inside = table.times

    def at(t: int, states: Mapping[int, tuple[str, str]]) -> tuple[str, str]:
        """What ran at a row's time; a stop's row: at the sample before it (before the
        piece: at its first), so that the phases are the samples'."""
        found = states.get(t)
        return found if found is not None else states[
            inside[max(bisect_right(inside, t) - 1, 0)]]

    return WorkerTable(gpus, times, [at(t, cluster_at) for t in times],
                       [at(t, state_at) for t in times], thinned=True)


def stops_in(times: Sequence[int], last: int | None, usual: float | None) -> list[int]:
    """Where samples ``times`` (ms) stop for more than GAP_FACTOR times their usual interval
    (``usual_interval``, ``usual`` that of the pieces before, ``last`` their last sample):
    a time in the middle of each stop, where a row without values goes (one across the
    pieces' edge: just before the piece's first row, which tells what ran then)."""
    import numpy as np

    if not len(times):
        return []
    at = np.asarray(times, dtype=float)
    usual = usual_interval(at, usual)
    if usual is None:
        return []
    steps = np.diff(np.r_[at[:1] if last is None else float(last), at])
    return [(times[i - 1] + times[i]) // 2 if i else times[0] - 1
            for i in np.flatnonzero(steps > GAP_FACTOR * usual).tolist()]


def _marked(g: GpuTable, stops: Sequence[int]) -> GpuTable:
    """``g``'s rows with a row without values at each of ``stops`` (ms)."""
    if not stops:
        return g
    times, columns = list(g.times), [list(c) for c in g.columns]
    for t in sorted(stops, reverse=True):
        i = bisect_right(times, t)
        times.insert(i, t)
        for col in columns:
            col.insert(i, None)
    return GpuTable(g.gpu, g.uuid, times, columns)


Carried = Mapping[GpuKey, tuple[int, float | None]]
"""Each GPU's last sample time in the pieces before, and its usual interval (ms)."""


def carried(table: WorkerTable, before: Carried | None = None) -> dict[GpuKey, tuple[int,
                                                                                    float | None]]:
    """What the next piece's ``chart_rows`` needs of this one and those ``before``: each
    GPU's last sample time (where a stop across the edge starts) and usual interval."""
    out = dict(before or {})
    for g in table.gpus:
        if g.times:
            usual = (before or {}).get((g.gpu, g.uuid), (None, None))[1]
            out[g.gpu, g.uuid] = (g.times[-1], usual_interval(g.times, usual))
    return out


def usual_interval(times: Sequence[float], before: float | None) -> float | None:
    """The GPU's usual interval between samples (``break_gaps``' median): the piece's, where
    it has a few, else the one before it."""
    import numpy as np

    steps = np.diff(np.asarray(times, dtype=float))
    steps = steps[steps > 0]
    return float(np.median(steps)) if len(steps) >= FEW or (before is None and len(steps)) \
        else before
