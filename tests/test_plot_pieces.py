"""`collector plot` reads a worker file a piece at a time: whatever the pieces, the rows, the
cluster page's lines of each worker and the fleet's spread are those of the file read whole
(pure, over random files: several GPUs, stops, missing values, jobs changing)."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

import numpy as np
import pytest

from dask_metrics.collector.charts.layout import GAP_FACTOR, break_gaps, envelope
from dask_metrics.collector.charts.rows import FEW
from dask_metrics.collector.model.tables import joined
from dask_metrics.collector.output.traces import FIXED, WorkerFile, open_worker_file
from dask_metrics.collector.plot.overviews import MEMORY, UTIL, OverviewFold, Spread, combine

METRICS = ["total-mem", "mem-util", "compute-util", "peak-mem"]
STEP = 15.0
BUCKETS = 300


def random_file(path: Path, rng: random.Random) -> float:
    """A worker file of 1-3 GPUs scraped every 15 s with stops, missing values, a GPU that
    joins late and jobs that change; returns its last row's time."""
    gpus = rng.randint(1, 3)
    late = rng.randrange(0, 40)
    t, job, rows = rng.choice([0.0, 30.0]), "", []
    for _ in range(rng.randint(50, 400)):
        if rng.random() < 0.03:
            t += STEP * rng.randint(4, 30)  # samples stop
        if rng.random() < 0.05:
            job = rng.choice(["", "0", "1", "2"])
        for g in range(gpus):
            if g == 2 and len(rows) < late:
                continue
            used = rng.choice([None, rng.uniform(0, 40e9)]) if rng.random() < 0.1 \
                else rng.uniform(0, 40e9)
            util = None if rng.random() < 0.08 else rng.choice([0, 50, 100, rng.uniform(0, 100)])
            rows.append([f"{t:.3f}", "2026-01-01T00:00:00.000Z", "w", str(g), f"GPU-{g}", job,
                         "0" if job else "", job, "1" if job else "",
                         *("" if v is None else repr(v)
                           for v in (used, None if used is None else used / 4e8, util, used))])
        t += STEP
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*FIXED, *METRICS])
        writer.writerows(rows)
    return float(rows[-1][0])


def folded(found: WorkerFile, span: float, rows: int | None = None) -> OverviewFold:
    fold = OverviewFold(span, BUCKETS)
    for piece in found.pieces() if rows is None else found.pieces(rows):
        fold.add(piece, found.metrics)
    return fold


def state(fold: OverviewFold) -> str:
    return repr({m: [a.tolist() for a in (line.times, line.values, line.total, line.count,
                                          line.low, line.high)]
                 for m, line in fold.lines.items()})


@pytest.mark.parametrize("seed", range(40))
def test_a_file_read_in_pieces_is_the_file_read_whole(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    last = random_file(tmp_path / "w.csv", rng)
    found = open_worker_file(tmp_path / "w.csv")
    assert found.last == round(last * 1000)
    whole = folded(found, last + rng.choice([0.0, 600.0]))
    for rows in (1, rng.randint(2, 51), rng.randint(52, 120), rng.randint(121, 600)):
        assert repr(found.trace(joined(found.pieces(rows)))) == repr(
            found.trace(joined(found.pieces())))
        assert folded(found, whole.span, rows).samples == whole.samples
        if rows > FEW * 3:  # a piece of more sample times than FEW tells its usual interval
            assert state(folded(found, whole.span, rows)) == state(whole), rows
    table = joined(found.pieces())
    for metric, average in ((UTIL, True), (MEMORY, False)):
        times, values = combine(table, found.metrics.index(metric), average)
        line = whole.lines[metric]
        t, v = envelope(*break_gaps([x / 1000 for x in times],
                                    [math.nan if x is None else x for x in values]),
                        0.0, whole.span, BUCKETS)
        assert line.times.tolist() == t.tolist(), metric  # the page's line of the whole file
        assert str(line.values.tolist()) == str(v.tolist()), metric


@pytest.mark.parametrize("seed", range(10))
def test_the_spread_is_the_workers_lowest_mean_and_highest(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    files = []
    for i in range(rng.randint(1, 5)):
        random_file(tmp_path / f"w{i}.csv", rng)
        files.append(open_worker_file(tmp_path / f"w{i}.csv"))
    span = max(f.last or 0 for f in files) / 1000
    spread = Spread(span, BUCKETS)
    expected: dict[str, list[list[float]]] = {m: [[] for _ in range(BUCKETS)] for m in (UTIL,
                                                                                          MEMORY)}
    means: dict[str, list[list[float]]] = {m: [[] for _ in range(BUCKETS)] for m in expected}
    width = span / BUCKETS
    for f in files:
        spread.add(folded(f, span, rng.randint(1, 200)))
        table = joined(f.pieces())
        for metric, average in ((UTIL, True), (MEMORY, False)):
            mine: list[list[float]] = [[] for _ in range(BUCKETS)]
            for t, v in zip(*combine(table, f.metrics.index(metric), average), strict=True):
                if v is not None:
                    mine[min(int(t / 1000 // width), BUCKETS - 1)].append(v)
            for part, values in enumerate(mine):
                expected[metric][part] += values
                if values:
                    means[metric][part].append(sum(values) / len(values))
    for metric in (UTIL, MEMORY):
        found = spread.of(metric)
        assert found is not None
        middle, low, mean, high = (a.tolist() for a in found)
        drawn = {round(t / width - 0.5): i for i, t in enumerate(middle)
                 if not math.isnan(mean[i])}
        for part in range(BUCKETS):
            values = expected[metric][part]
            if not values:
                assert part not in drawn
                continue
            i = drawn[part]
            assert middle[i] == pytest.approx((part + 0.5) * width)
            assert (low[i], high[i]) == (min(values), max(values))
            assert mean[i] == pytest.approx(np.mean(means[metric][part]), rel=1e-12)
        gaps = [math.isnan(v) for v in mean]  # a break where the parts drawn stop
        assert gaps == [math.isnan(v) for v in low] == [math.isnan(v) for v in high]
        steps = np.diff([middle[drawn[part]] for part in sorted(drawn)])
        assert sum(gaps) == int(np.sum(steps > GAP_FACTOR * np.sort(steps)[len(steps) // 2])
                                if len(steps) else 0)
    assert Spread(span, BUCKETS).of(UTIL) is None
