"""Peaks dated by the exporter's stamp, against a scripted truth (pure, no servers).

``scrape`` plays the exporter and Prometheus: a memory timeline sampled every 0.5 s into a
trailing-window maximum (the exporter's own WindowMax), scraped every S seconds. Every peak
the collector finds is compared with the true maximum of the internal samples in the range:
exact where it says exact, and never above the truth nor below it where it gives a bound.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable

import pytest

from dask_metrics.collector.model.columns import (
    NEXT_PEAK_METRIC,
    NEXT_PEAK_TIME_METRIC,
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    ROUND_TIME_METRIC,
    SAMPLES_METRIC,
    USED_METRIC,
)
from dask_metrics.collector.model.series import Series, Timeline
from dask_metrics.collector.peaks.fold import gpu_peaks
from dask_metrics.exporter.peak import WindowMax

GiB = 2**30
TICK = 0.5  # the exporter's sampling interval
T0 = 1_000_000.0  # unix seconds of the timeline's 0
LABELS = {"gpu": "0", "uuid": "GPU-a"}


def scrape(memory: Callable[[float], float], scrape_every: float, window: float,
           end: float, phase: float = 0.0, drop: Callable[[float], bool] = lambda t: False,
           restart: tuple[float, float] | None = None, levels: int = 2
           ) -> dict[str, list[Series]]:
    """What Prometheus holds of one GPU: each scrape's used, peak and peak stamp, and the
    exporter's sampling rounds. ``restart``: the exporter is down from the first time to the
    second (no samples, no scrapes), then starts again with a new window and count.
    ``levels`` 1: an exporter that does not give the next peak."""
    peak = WindowMax(window)
    used, peaks, stamps, nexts, next_stamps, rounds, round_at = (
        Series({"__name__": n, **labels}) for n, labels in (
            (USED_METRIC, LABELS), (PEAK_METRIC, LABELS), (PEAK_TIME_METRIC, LABELS),
            (NEXT_PEAK_METRIC, LABELS), (NEXT_PEAK_TIME_METRIC, LABELS),
            (SAMPLES_METRIC, {}), (ROUND_TIME_METRIC, {})))
    down = (lambda t: restart[0] <= t < restart[1]) if restart else (lambda t: False)
    samples = [t for i in range(int(end / TICK) + 1) if not down(t := i * TICK)]
    scrapes = [phase + k * scrape_every for k in range(int((end - phase) / scrape_every) + 1)]
    current = (0.0, 0.0)
    i = count = 0
    for s in scrapes:
        while i < len(samples) and samples[i] <= s:
            t = samples[i]
            if restart and count and t >= restart[1] > samples[i - 1]:
                peak, count = WindowMax(window), 0  # a new process
            current = peak.add(t, memory(t), T0 + t)
            last_used = memory(t)
            count += 1
            i += 1
        restarting = restart and samples[i - 1] < restart[1] <= s  # not sampled yet
        if drop(s) or down(s) or i == 0 or restarting:
            continue
        ms = round((T0 + s) * 1000)
        after = peak.after() if levels > 1 else None
        for series, v in ((used, last_used), (peaks, current[0]), (stamps, current[1]),
                          (rounds, count), (round_at, T0 + samples[i - 1]),
                          *(((nexts, after[0]), (next_stamps, after[1])) if after else ())):
            series.times.append(ms)
            series.values.append(v)
    return {USED_METRIC: [used], PEAK_METRIC: [peaks], PEAK_TIME_METRIC: [stamps],
            NEXT_PEAK_METRIC: [nexts], NEXT_PEAK_TIME_METRIC: [next_stamps],
            SAMPLES_METRIC: [rounds], ROUND_TIME_METRIC: [round_at]}


def truth(memory: Callable[[float], float], a: float, b: float) -> float:
    return max(memory(i * TICK) for i in range(math.ceil(a / TICK), math.floor(b / TICK) + 1))


def session_peak(held, a: float, b: float, window: float, timeline: Timeline | None = None):
    (p,) = gpu_peaks("w", held, timeline or Timeline([], []), 10**9, since=ms(a),
                     until=ms(b), peak_window=round((window + TICK) * 1000),
                     sample_interval=round(TICK * 1000))
    return p


def ms(t: float) -> int:
    return round((T0 + t) * 1000)


def steps(*points: tuple[float, float, float]) -> Callable[[float], float]:
    """Memory that is ``v`` GiB in [t0, t1) for each (t0, t1, v), 1 GiB elsewhere."""
    def memory(t: float) -> float:
        for t0, t1, v in points:
            if t0 <= t < t1:
                return v * GiB
        return 1 * GiB
    return memory


@pytest.mark.parametrize("every", [1, 5, 15, 60])
def test_a_spike_right_after_the_start_counts_before_any_scrape_sees_it(every):
    memory = steps((100.5, 101.5, 6))  # a 1 s spike 0.5 s after the start
    held = scrape(memory, every, window=max(30, every), end=300, phase=0.25)
    p = session_peak(held, 100, 200, window=max(30, every))
    assert p.peak_bytes == 6 * GiB and p.exact
    assert ms(100.5) <= p.time < ms(101.5)  # dated when it happened, not at a scrape


@pytest.mark.parametrize("levels", [1, 2])
@pytest.mark.parametrize("every", [1, 5, 15, 60])
def test_a_spike_before_the_start_is_not_the_sessions(every, levels):
    memory = steps((98, 99.5, 9), (120, 121, 3))  # 9 GiB just before, 3 GiB inside
    held = scrape(memory, every, window=max(30, every), end=300, phase=0.25, levels=levels)
    p = session_peak(held, 100, 200, window=max(30, every))
    assert p.peak_bytes == 3 * GiB
    if every <= 5 or levels == 2:  # a window dated inside, or the next peak, covers it all
        assert p.exact
    else:  # the first seconds lie only in windows that hold the 9 GiB: said, as a bound
        assert p.upper_bytes == 9 * GiB


def test_the_next_peak_dates_what_a_larger_value_just_before_would_hide():
    # 9 GiB until 0.5 s before the start; the session holds 2 GiB, and 3 GiB at 100.5 s,
    # in every window that also holds the 9 GiB: the next peak (the largest value after
    # the 9 GiB) shows it; without it the 3 GiB is hidden, and the bound says so.
    memory = steps((0, 99.5, 9), (100, 100.6, 3), (100.6, 400, 2))
    for levels, (found, upper) in ((2, (3 * GiB, None)), (1, (2 * GiB, 9 * GiB))):
        held = scrape(memory, 5, window=30, end=400, phase=2, levels=levels)
        p = session_peak(held, 100, 300, window=30)
        assert (p.peak_bytes, p.upper_bytes) == (found, upper)
    assert "up to 9.00 GiB" in p.caveat()


def test_a_staircase_before_the_start_deeper_than_the_next_peak_is_a_bound():
    memory = steps((0, 99.1, 9), (99.1, 99.6, 8), (100, 100.6, 3), (100.6, 400, 2))
    held = scrape(memory, 5, window=30, end=400, phase=2)
    p = session_peak(held, 100, 300, window=30)
    assert p.peak_bytes == 2 * GiB and p.upper_bytes == 8 * GiB


def test_a_hole_in_the_scrapes_makes_the_peak_unknown_there():
    memory = steps((150, 151, 5))
    held = scrape(memory, 5, window=10, end=300, drop=lambda s: 140 < s < 170)
    p = session_peak(held, 100, 250, window=10)
    assert p.peak_bytes == 1 * GiB  # the spike fell in the hole
    assert p.upper_bytes == math.inf and "no peak window" in p.caveat()


def test_a_spike_while_the_exporter_was_down_is_not_claimed_after_its_restart():
    # The sidecar is down from 140 s to 146 s (between two 15 s scrapes) and missed a spike;
    # its first window after the restart reaches back only to 146 s.
    memory = steps((142, 144, 8))
    held = scrape(memory, 15, window=30, end=300, phase=5, restart=(140, 146))
    p = session_peak(held, 100, 250, window=30)
    assert p.peak_bytes == 1 * GiB
    assert p.upper_bytes == math.inf and not p.exact


def test_each_spike_is_credited_to_the_dag_that_ran_when_it_happened():
    # DAG A until 130 s with 12 GiB for 0.5 s 1 s before its end; DAG B from 130 s, 3.6 GiB.
    memory = steps((128.6, 129.1, 12), (140, 141, 3.6))
    held = scrape(memory, 1, window=30, end=300, phase=0.25)
    timeline = Timeline([ms(t) for t in (100, 130, 160)],
                        [("0", "0"), ("1", "0"), ("", "")])
    found = {p.job: p for p in gpu_peaks("w", held, timeline, 10**9, by_job=True,
                                          since=ms(100), until=ms(200), peak_window=30_500,
                                          sample_interval=500)}
    assert found["0"].peak_bytes == 12 * GiB
    assert found["1"].peak_bytes == 3.6 * GiB


@pytest.mark.parametrize("seed", range(300))
def test_never_above_the_truth_and_exact_where_it_says_so(seed):
    rng = random.Random(seed)
    spikes = [(t, t + rng.choice([0.5, 1, 3, 20]), rng.uniform(1, 16))
              for t in sorted(rng.uniform(0, 400) for _ in range(rng.randint(1, 12)))]
    memory = steps(*spikes)
    every = rng.choice([1, 5, 15, 60])
    window = rng.choice([every, 30, 60]) if every < 60 else 60
    restart = None
    if rng.random() < 0.3:
        r = rng.uniform(60, 400)
        restart = (r, r + rng.uniform(0.5, 90))
    held = scrape(memory, every, window, end=500, phase=rng.uniform(0, every), restart=restart,
                  levels=rng.choice([1, 2]))
    a = rng.uniform(50, 250)
    b = a + rng.uniform(TICK + 0.01, 200)  # an internal sample inside, to compare with
    p = session_peak(held, a, b, window)
    real = truth(memory, a, b)  # also while the exporter was down: it is not to claim it
    if p.exact:
        assert p.peak_bytes == real
    elif math.isnan(p.peak_bytes):  # nothing dated inside, and no window over it all
        assert p.upper_bytes == math.inf
    elif p.upper_bytes == p.peak_bytes:  # nothing dated inside: an upper bound alone
        assert real <= p.upper_bytes
    else:
        assert p.peak_bytes <= real <= p.upper_bytes


def test_a_session_between_two_scrapes_gets_the_bound_of_the_window_over_it():
    memory = steps((0, 1000, 4))  # 4 GiB held throughout
    held = scrape(memory, 60, window=60, end=400, phase=10)
    p = session_peak(held, 100, 110, window=60)  # scrapes at 70 and 130: none inside
    assert p.peak_bytes == p.upper_bytes == 4 * GiB and not p.exact
    assert "at most" in p.caveat()


@pytest.mark.parametrize("seed", range(200))
def test_where_no_stretch_is_above_the_peak_only_a_hole_raises_the_bound(seed):
    # upper_bound skips the sweep then: the sweep's own answer must be the same
    from dask_metrics.collector.peaks.timing import _covered, _swept

    rng = random.Random(seed)
    lo, hi = 0, rng.randint(2, 200)
    spans = []
    for _ in range(rng.randint(1, 12)):
        a = rng.randint(lo, hi - 1)
        spans.append((a, min(a + rng.randint(1, 60), hi), rng.choice([1.0, 2.0, 3.0]),
                      rng.random() < 0.3))
    found = max(v for *_, v, _ in spans) + rng.choice([0.0, 1.0])
    swept = _swept(spans, lo, hi, found)
    assert swept == (found if _covered([x[:2] for x in spans], lo, hi) else math.inf)


@pytest.mark.parametrize("seed", range(100))
def test_the_sweep_bounds_each_moment_by_its_tightest_window(seed):
    """Moment by moment: nothing above ``found`` where a stretch dated inside covers it,
    else the least of the maxima over it; a maximum that is NaN (a failed reading) says
    nothing, so a moment under NaN windows alone is unbounded, as one under none. (A heap
    ordered by values with a NaN among them once gave its top: neither the least of the
    others nor nothing.)"""
    from dask_metrics.collector.peaks.timing import _swept

    rng = random.Random(seed)
    for _ in range(50):
        lo = rng.randint(0, 50)
        hi = lo + rng.randint(1, 100)
        spans = []
        for _ in range(rng.randint(1, 8)):
            a = max(rng.randint(lo - 10, hi), lo)
            b = min(a + rng.randint(1, 40), hi)
            if a < b:
                spans.append((a, b, rng.choice([1.0, 2.0, 3.0, math.nan]), rng.random() < 0.2))
        if not spans:
            continue
        found = rng.choice([0.0, 1.5, 2.0])
        want = found
        for moment in range(lo, hi):  # integer edges: each moment (m, m + 1) by itself
            over = [s for s in spans if s[0] <= moment < s[1]]
            if any(clean for *_, clean in over):
                continue
            numbers = [v for _, _, v, _ in over if not math.isnan(v)]
            want = max(want, min(numbers)) if numbers else math.inf
        assert _swept(spans, lo, hi, found) == want, (spans, lo, hi, found)


@pytest.mark.parametrize("seed", range(300))
def test_the_bound_is_the_sweeps_of_every_stretch(seed):
    # upper_bound answers most ranges from each scrape's covered time and largest maximum:
    # the same as the sweep over every stretch, stamps outside their windows, NaN and
    # scrapes without a next peak included
    from dask_metrics.collector.peaks.timing import _swept, cover, upper_bound

    rng = random.Random(seed)
    times = sorted(rng.sample(range(0, 400), rng.randint(1, 25)))
    values = [rng.choice([1.0, 2.0, 3.0, 4.0, math.nan if rng.random() < 0.05 else 2.0])
              for _ in times]
    stamps = [(t + rng.choice([-40, -25, -10, -1, 0, 0, 0, 5])) / 1000 for t in times]
    metrics = {PEAK_METRIC: (times, values), PEAK_TIME_METRIC: (times, stamps)}
    if rng.random() < 0.7:
        kept = [t for t in times if rng.random() < 0.8]
        metrics[NEXT_PEAK_METRIC] = (kept, [rng.choice([1.0, 2.0, 5.0]) for _ in kept])
        metrics[NEXT_PEAK_TIME_METRIC] = (kept, [(t - rng.choice([0, 3, 50])) / 1000
                                                 for t in kept])
    known = cover(metrics, [rng.choice([0, 10, 30, 30, 30]) for _ in times])
    for _ in range(20):
        lo = rng.randint(-50, 420)
        hi = lo + rng.randint(1, 200)
        found = rng.choice([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        a, b = max(lo, times[0] - known.reach[0]), min(hi, times[-1])
        if a >= b:
            continue
        first, last = bisect_left(times, a), bisect_right(times, b + known.longest)
        spans = [(max(x, a), min(y, b), v, d is not None and a <= d <= b)
                 for stretches in known.stretches[first:last] for x, y, v, d in stretches]
        want = _swept([s for s in spans if s[0] < s[1]], a, b, found)
        got = upper_bound(known, lo, hi, found)
        assert got == want or (math.isnan(got) and math.isnan(want)), (lo, hi, found)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_sample_count_that_is_no_number_is_as_good_as_none(bad):
    # the exporter's dask_gpu_exporter_samples_total mangled at some scrapes (a broken store
    # or relabelling): the peak is what it is without those counts, no crash
    memory = steps((60, 61, 6), (200, 230, 9))
    held = scrape(memory, 15, window=30, end=300, phase=5, restart=(100, 120))
    (rounds,) = held[SAMPLES_METRIC]
    mangled = {**held, SAMPLES_METRIC: [Series(rounds.labels, list(rounds.times),
                                               [bad if k % 3 == 0 else v for k, v in
                                                enumerate(rounds.values)])]}
    kept = [k for k in range(len(rounds.times)) if k % 3]
    missing = {**held, SAMPLES_METRIC: [Series(rounds.labels, [rounds.times[k] for k in kept],
                                               [rounds.values[k] for k in kept])]}
    for a, b in ((0, 300), (50, 150), (110, 140), (190, 240)):
        assert session_peak(mangled, a, b, window=30) == session_peak(missing, a, b, window=30)


def test_a_job_before_the_gpus_first_sample_has_an_unknown_peak_not_zero():
    """The sidecar's first scrape comes after job 0 ran: no window covers any of its time,
    so its peak is unknown (no number, no bound), not "at most 0"; job 1, in the data, has
    its own."""
    memory = steps((160, 161, 5))
    held = scrape(memory, 5, window=30, end=300, phase=0.25)
    late = {m: [Series(s.labels, [t for t in s.times if t >= ms(150)],
                       [v for t, v in zip(s.times, s.values, strict=True) if t >= ms(150)])
                for s in found] for m, found in held.items()}
    timeline = Timeline([ms(t) for t in (100, 105, 140, 145, 150, 155, 160, 165)],
                        [("0", "0")] * 2 + [("1", "0")] * 6)
    found = {p.job: p for p in gpu_peaks("w", late, timeline, 10_000, by_job=True,
                                          since=ms(100), until=ms(200), peak_window=30_500,
                                          sample_interval=500)}
    assert math.isnan(found["0"].peak_bytes) and found["0"].upper_bytes == math.inf
    assert found["1"].peak_bytes == 5 * GiB and found["1"].exact
