"""A long range's peaks folded a piece at a time (peaks.PeakFold) are those of the range
read whole, to the byte, the time, the job and the bound (pure, no servers): random GPUs
scraped every 1 to 60 s with holes, restarts, exporters that do not date their peaks or
start to mid-range, GPUs that appear and vanish, stamps a little late, cut at random."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from dask_metrics.collector.model.columns import PEAK_METRIC, PEAK_TIME_METRIC, TOTAL_METRIC
from dask_metrics.collector.model.series import Series, Timeline
from dask_metrics.collector.peaks.fold import PeakFold, peaks_over
from dask_metrics.collector.query.pieces import pieces
from tests.test_peak_time import TICK, GiB, ms, scrape, steps

AGE = 30_000  # ms: the scheduler's scrapes are at most this old


def _clip(held: dict[str, list[Series]], lo: int, hi: int) -> dict[str, list[Series]]:
    """What a query of [lo, hi] (ms) reads of these series."""
    out: dict[str, list[Series]] = {}
    for metric, found in held.items():
        for s in found:
            kept = [(t, v) for t, v in zip(s.times, s.values, strict=True) if lo <= t <= hi]
            if kept:
                out.setdefault(metric, []).append(
                    Series(s.labels, [t for t, _ in kept], [v for _, v in kept]))
    return out


def _gpu(rng: random.Random, gpu: str, every: float, window: float, phase: float,
         restart: tuple[float, float] | None, end: float) -> dict[str, list[Series]]:
    """One GPU's series, relabelled, with what may go wrong with it."""
    spikes = [(t, t + rng.choice([0.5, 1, 3, 20, 200]), rng.uniform(1, 16))
              for t in sorted(rng.uniform(0, end) for _ in range(rng.randint(1, 25)))]
    held = scrape(steps(*spikes), every, window, end=end, phase=phase, restart=restart,
                  levels=rng.choice([1, 2]))
    held = {m: [replace(s, labels={**s.labels, "gpu": gpu, "uuid": f"GPU-{gpu}"})
                if s.labels else s for s in found] for m, found in held.items()}
    total = held[PEAK_METRIC][0]
    held[TOTAL_METRIC] = [Series({"gpu": gpu, "uuid": f"GPU-{gpu}"}, list(total.times),
                                 [(16 if t < ms(end / 2) else 24) * GiB for t in total.times])]
    what = rng.random()
    if what < 0.1:  # an exporter that does not date its peaks
        del held[PEAK_TIME_METRIC]
    elif what < 0.2:  # ... until it is upgraded mid-range
        held.update(_clip({PEAK_TIME_METRIC: held[PEAK_TIME_METRIC]}, ms(end / 2), ms(end)))
    elif what < 0.25:  # no peak gauge at all: used memory alone
        del held[PEAK_METRIC], held[PEAK_TIME_METRIC]
    elif what < 0.35:  # stamps a little after their scrape (another host's clock)
        s = held[PEAK_TIME_METRIC][0]
        held[PEAK_TIME_METRIC] = [replace(s, values=[v + 0.004 for v in s.values])]
    if rng.random() < 0.3:  # it appears late, or vanishes early
        a, b = sorted(rng.uniform(0, end) for _ in range(2))
        held = _clip(held, ms(a), ms(b))
    if rng.random() < 0.3:  # a hole in its scrapes
        a = rng.uniform(0, end)
        held = {m: [replace(s, times=[t for t in s.times if not ms(a) <= t <= ms(a + 400)],
                            values=[v for t, v in zip(s.times, s.values, strict=True)
                                    if not ms(a) <= t <= ms(a + 400)]) for s in found]
                for m, found in held.items()}
    return held


def _timeline(rng: random.Random, end: float) -> Timeline:
    """The scheduler's scrapes of what the worker ran: jobs of several DAGs, idle spells, a
    spell without scrapes."""
    every = rng.choice([5, 15])
    times, states = [], []
    state = ("", "")
    gap = rng.uniform(0, end)
    for k in range(int(end / every)):
        t = k * every + 0.3
        if gap <= t < gap + rng.choice([0, 100]):
            continue
        if rng.random() < 0.08:
            state = rng.choice([("", ""), ("1", "a"), ("1", "b"), ("2", "a"), ("3", "c")])
        times.append(ms(t))
        states.append(state)
    return Timeline(times, states)


def _dags(timeline: Timeline) -> Timeline:
    return Timeline(timeline.times, [(f"{j}/{d}", d) if j else s
                                     for s, (j, d) in zip(timeline.states, timeline.states,
                                                          strict=True)])


@pytest.mark.parametrize("seed", range(200))
def test_a_range_folded_a_piece_at_a_time_is_the_range_read_whole(seed):
    rng = random.Random(seed)
    end = 1500.0
    every = rng.choice([1, 5, 15, 60])
    window = rng.choice([every, 30, 60]) if every < 60 else 60
    restart = None
    if rng.random() < 0.3:
        r = rng.uniform(60, end)
        restart = (r, r + rng.uniform(0.5, 200))
    phase = rng.uniform(0, every)
    held: dict[str, list[Series]] = {}
    for gpu in ("0", "1", "2"):
        for metric, found in _gpu(rng, gpu, every, window, phase, restart, end).items():
            mine = [s for s in found if s.labels]
            exporter = [s for s in found if not s.labels and metric not in held]
            held.setdefault(metric, []).extend(mine + exporter)
    timeline = _timeline(rng, end)
    timelines = [(_dags(timeline), True), (timeline, False)]
    reach = round((window + TICK) * 1000)
    since, until = ms(rng.uniform(0, 300)), ms(rng.uniform(400, end + 30))
    start, stop = ms(0), until + reach  # what peaks reads: a peak window past the end
    kw = {"since": since, "until": until, "peak_window": reach, "sample_interval": 500}
    whole = peaks_over("w", _clip(held, start, stop), timelines, AGE, **kw)

    length = max(reach, round(rng.choice([1, 2, 100, 300]) * 1000))
    cut = pieces(since, until, start, stop, length, 0)
    margin = 2 * reach
    fold = PeakFold("w", [True, False], AGE, **kw)
    for k, piece in enumerate(cut):
        a, b = piece.lo, piece.hi + 1
        fold.add(_clip(held, start if k == 0 else a, b + reach),
                 [t.between(a - margin - AGE, b + margin + AGE) for t, _ in timelines],
                 a, b, margin, final=k == len(cut) - 1)
    assert repr(fold.result()) == repr(whole)
