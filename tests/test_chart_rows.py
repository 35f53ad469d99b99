"""A worker's table thinned to what its chart draws (report/chart_rows.py), a piece at a
time: every bucket's lowest and highest value of each drawn column, the holes in them, the
phases of what ran and each GPU's capacity are those of the whole table."""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest

from dask_metrics.collector.charts.layout import break_gaps
from dask_metrics.collector.charts.rows import DRAWN, carried, chart_rows
from dask_metrics.collector.model.tables import GpuTable, WorkerTable, joined
from dask_metrics.collector.output.traces import phases, trace_of_table

COLUMNS = ("compute-util", "total-mem", "mem-util", "peak-mem", "energy")
LO, HI, BUCKETS = 0, 600_000, 20
STOP = (400_000, 430_000)  # no sample: a stop the chart breaks its lines at


def _table(rng: random.Random, start: int, end: int) -> WorkerTable:
    """Two GPUs scraped every 1-5 s in [start, end), values missing now and then, a job
    that changes every few minutes."""
    times = sorted(t for t in rng.sample(range(start, end, 1000), (end - start) // 1200)
                   if not STOP[0] <= t < STOP[1])
    jobs = [("", ""), ("a", "1"), ("b", "2")]
    worker = [jobs[(t // 97_000) % 3] for t in times]
    gpus = []
    for gpu in ("0", "1"):
        columns = []
        for name in COLUMNS:
            cut = rng.random() < 0.5  # a stretch without values
            columns.append([None if (cut and 200_000 < t < 260_000) or rng.random() < 0.002
                            else (0.0 if name == "mem-util" and rng.random() < 0.3
                                  else round(rng.uniform(0, 100), 1)) for t in times])
        gpus.append(GpuTable(gpu, f"GPU-{gpu}", list(times), columns))
    return WorkerTable(gpus, times, [("", "")] * len(times), worker)


def _extremes(table: WorkerTable) -> dict[tuple[str, str, int], tuple[float, float]]:
    width = (HI - LO) / BUCKETS
    found: dict[tuple[str, str, int], tuple[float, float]] = {}
    for g in table.gpus:
        for k, name in enumerate(COLUMNS):
            if name not in DRAWN:
                continue
            for t, v in zip(g.times, g.columns[k], strict=True):
                if v is None:
                    continue
                key = (g.gpu, name, min(int((t - LO) // width), BUCKETS - 1))
                low, high = found.get(key, (v, v))
                found[key] = (min(low, v), max(high, v))
    return found


def _holes(table: WorkerTable, times: set[int]) -> list[list[tuple[int, int]]]:
    """Each GPU and drawn column's stretches of consecutive rows with values, by their
    times (rows at ``times`` only: not the marks of stops)."""
    out = []
    for g in table.gpus:
        rows = [i for i, t in enumerate(g.times) if t in times]
        g = GpuTable(g.gpu, g.uuid, [g.times[i] for i in rows],
                     [[c[i] for i in rows] for c in g.columns])
        for name, col in zip(COLUMNS, g.columns, strict=True):
            if name not in DRAWN:
                continue
            runs, begin = [], None
            for i, v in enumerate(col):
                if v is not None and begin is None:
                    begin = i
                if v is None and begin is not None:
                    runs.append((g.times[begin], g.times[i - 1]))
                    begin = None
            if begin is not None:
                runs.append((g.times[begin], g.times[-1]))
            out.append(runs)
    return out


def _stops(times: list[int]) -> list[tuple[int, int]]:
    """Where break_gaps breaks a line through samples at ``times``: (before, after)."""
    marked, _ = break_gaps(times, [1.0] * len(times))
    at = [i for i, t in enumerate(marked) if t not in times]
    return [(int(marked[i - 1]), int(marked[i + 1])) for i in at]


def _marks(g: GpuTable, times: set[int]) -> list[tuple[int, int]]:
    """The stops a thinned GPU marks: (the samples around each row without values that is
    not a sample)."""
    known = sorted(times)
    return [(known[bisect_left(known, t) - 1], known[bisect_left(known, t)])
            for t, *values in zip(g.times, *g.columns, strict=True)
            if t not in times and all(v is None for v in values)]


@pytest.mark.parametrize("seed", range(20))
def test_thinned_pieces_draw_what_the_whole_table_draws(seed: int) -> None:
    rng = random.Random(seed)
    whole = _table(rng, LO, HI)
    # one piece's edge inside the stop, the others anywhere
    cuts = sorted([rng.randrange(*STOP), *rng.sample(range(LO + 1000, HI, 1000), 2)])
    pieces = []
    for a, b in zip([LO, *cuts], [*cuts, HI], strict=True):
        rows = [i for i, t in enumerate(whole.times) if a <= t < b]
        pieces.append(WorkerTable(
            [GpuTable(g.gpu, g.uuid, [g.times[i] for i in rows],
                      [[c[i] for i in rows] for c in g.columns]) for g in whole.gpus],
            [whole.times[i] for i in rows], [whole.cluster[i] for i in rows],
            [whole.worker[i] for i in rows]))
    thin, before = [], {}
    for piece in pieces:
        thin.append(chart_rows(piece, COLUMNS, LO, HI, before, BUCKETS))
        before = carried(piece, before)
    thin = joined(thin)
    assert thin.thinned and thin.rows < whole.rows / 2
    assert _extremes(thin) == _extremes(whole)
    assert _holes(thin, set(whole.times)) == _holes(whole, set(whole.times))
    for mine, theirs in zip(thin.gpus, whole.gpus, strict=True):
        found = _stops(theirs.times)
        assert any(a < STOP[0] and b >= STOP[1] for a, b in found)
        assert _marks(mine, set(whole.times)) == found
    assert phases(zip(thin.times, *zip(*thin.worker, strict=True), strict=True)) == \
        phases(zip(whole.times, *zip(*whole.worker, strict=True), strict=True))
    mine, theirs = (trace_of_table("w", "w", t, COLUMNS, LO) for t in (thin, whole))
    assert [g.capacity() for g in mine.gpus] == [g.capacity() for g in theirs.gpus]
    assert [(g.times[0], g.times[-1]) for g in mine.gpus] == \
        [(g.times[0], g.times[-1]) for g in theirs.gpus]
