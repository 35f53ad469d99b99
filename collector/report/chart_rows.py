"""The rows of a worker's table that its chart draws (pure): a long range read in pieces keeps,
for the workers it may chart, each piece's table thinned to those rows, so that what a chart
holds is bounded by its width, not by the range.

A chart draws each series as its envelope per pixel column (``chart_layout.envelope``): the
lowest and the highest sample of each column, a line broken where values are missing or
samples stop, and the job/DAG phases. Kept: in each of ``buckets`` equal parts of the range
(more than the chart's columns), per GPU the first and the last row and those with the lowest
and the highest value of each drawn column; the rows on both sides of a value that appears
or vanishes and of a change of what the worker ran; each GPU's first row that tells its
capacity. The picture is the whole table's up to a pixel column (a stop in the samples
shorter than a bucket is not drawn)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dask_metrics.collector.tables import GpuTable, WorkerTable

CHART_BUCKETS = 2048
"""Parts of the range thinned alike: over twice the chart's pixel columns (chart.WIDTH)."""
DRAWN = ("compute-util", "mem-bw-util", "total-mem", "peak-mem")
CAPACITY = ("total-mem", "mem-util")  # a row with both tells the GPU's capacity


def chart_rows(table: WorkerTable, columns: Sequence[str], lo: int, hi: int,
               buckets: int = CHART_BUCKETS) -> WorkerTable:
    """The rows of ``table`` (``columns``: its column names) a chart of [lo, hi] (ms)
    draws."""
    import numpy as np

    state_at = dict(zip(table.times, table.worker, strict=True))
    width = max(hi - lo, 1) / buckets
    gpus = []
    for g in table.gpus:
        n = len(g.times)
        if not n:
            continue
        where = np.clip(((np.asarray(g.times, dtype=float) - lo) // width).astype(np.int64),
                        0, buckets - 1)
        edge = np.flatnonzero(where[1:] != where[:-1])
        keep = [np.r_[0, edge, edge + 1, n - 1]]
        values = {name: np.array([np.nan if v is None else v for v in g.columns[k]], dtype=float)
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
        states = [state_at[t] for t in g.times]
        changes = [i for i in range(1, n) if states[i] != states[i - 1]]
        keep.append(np.array([*changes, *(i - 1 for i in changes)], dtype=np.int64))
        rows = np.unique(np.concatenate(keep)).tolist()
        gpus.append(GpuTable(g.gpu, g.uuid, [g.times[i] for i in rows],
                             [[col[i] for i in rows] for col in g.columns]))
    times = sorted({t for g in gpus for t in g.times})
    cluster_at = dict(zip(table.times, table.cluster, strict=True))
    return WorkerTable(gpus, times, [cluster_at[t] for t in times], [state_at[t] for t in times])


def joined(tables: Iterable[WorkerTable]) -> WorkerTable:
    """Consecutive pieces' tables as one: each GPU's rows in order (a GPU missing from a
    piece has none there)."""
    gpus: dict[tuple[str, str], GpuTable] = {}
    times: list[int] = []
    cluster: list[tuple[str, str]] = []
    worker: list[tuple[str, str]] = []
    for table in tables:
        for g in table.gpus:
            found = gpus.setdefault((g.gpu, g.uuid), GpuTable(g.gpu, g.uuid, [],
                                                              [[] for _ in g.columns]))
            found.times.extend(g.times)
            for mine, more in zip(found.columns, g.columns, strict=True):
                mine.extend(more)
        times += table.times
        cluster += table.cluster
        worker += table.worker
    return WorkerTable(list(gpus.values()), times, cluster, worker)
