"""A peak window that follows the scrapes, against a scripted truth (pure, no servers).

The exporter's own Sampler samples a scripted GPU every 0.5 s on a deterministic clock;
Prometheus replicas scrape it (each scrape noted in the ScrapeLog, as the sidecar's and the
worker's /metrics do) and keep what they read, the window of each scrape included; the
collector's peaks over each replica's samples are compared with the true maximum of the
internal samples in the range: exact where said, and never a silently wrong number.
"""

from __future__ import annotations

import math
import random
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
    WINDOW_METRIC,
)
from dask_metrics.collector.model.series import Series, Timeline
from dask_metrics.collector.peaks.fold import gpu_peaks
from dask_metrics.exporter.sampler import Sampler
from dask_metrics.exporter.scrapes import MAX_CLIENTS, ScrapeLog
from dask_metrics.exporter.target import Target
from tests.test_sampler import UUIDS, Clock, ScriptedSource

GiB = 2**30
TICK = 0.5
T0 = 1_000_000.0  # unix seconds of the clock's 0
GPU = UUIDS[0]
SERIES = (USED_METRIC, PEAK_METRIC, PEAK_TIME_METRIC, NEXT_PEAK_METRIC, NEXT_PEAK_TIME_METRIC)
EXPORTER = (SAMPLES_METRIC, ROUND_TIME_METRIC, WINDOW_METRIC)


class Replica:
    """One Prometheus: scrapes every ``every`` seconds from ``phase``, as ``client``."""

    def __init__(self, client: str, every: float, phase: float,
                 down: Callable[[float], bool] = lambda t: False) -> None:
        self.client, self.every, self.phase, self.down = client, every, phase, down
        labels = {"gpu": "0", "uuid": GPU}
        self.held = {n: [Series({"__name__": n, **labels})] for n in SERIES}
        self.held |= {n: [Series({"__name__": n})] for n in EXPORTER}

    def times(self, end: float) -> list[float]:
        return [t for k in range(int((end - self.phase) / self.every) + 1)
                if not self.down(t := self.phase + k * self.every)]

    def keep(self, t: float, snap) -> None:
        (g,) = [g for g in snap.gpus if g.ref.uuid == GPU]
        values = {USED_METRIC: g.reading.memory_used, PEAK_METRIC: g.peak_bytes,
                  PEAK_TIME_METRIC: g.peak_time, SAMPLES_METRIC: snap.samples_total,
                  ROUND_TIME_METRIC: snap.timestamp, WINDOW_METRIC: snap.peak_window}
        if g.next_peak is not None:
            values[NEXT_PEAK_METRIC], values[NEXT_PEAK_TIME_METRIC] = g.next_peak
        for name, value in values.items():
            (series,) = self.held[name]
            series.times.append(round((T0 + t) * 1000))
            series.values.append(value)


def run(memory: Callable[[float], float], replicas: list[Replica], end: float,
        follow: bool = True, peak_window: float = 30.0) -> None:
    """Sample ``memory`` every TICK and let each replica scrape: a scrape at s reads the
    last round sampled at or before s, as a page served from the latest snapshot does."""
    source, clock = ScriptedSource(), Clock()
    clock.t = 0.0
    scrapes = ScrapeLog(clock=clock) if follow else None
    sampler = Sampler(source, lambda: Target("w", None), interval=TICK, peak_window=peak_window,
                      clock=clock, scrapes=scrapes, longest_window=600.0,
                      wall=lambda: T0 + clock.t)
    events = sorted([(k * TICK, 0, None) for k in range(int(end / TICK) + 1)]
                    + [(t, 1, r) for r in replicas for t in r.times(end)],
                    key=lambda e: (e[0], e[1]))
    for t, kind, replica in events:
        clock.t = t
        if kind == 0:
            source.used[GPU] = memory(t)
            sampler.sample_once()
            continue
        if scrapes is not None:
            scrapes.scraped(replica.client)
        replica.keep(t, sampler.snapshot)


def peak(replica: Replica, a: float, b: float):
    (p,) = gpu_peaks("w", replica.held, Timeline([], []), 10**9,
                     since=round((T0 + a) * 1000), until=round((T0 + b) * 1000),
                     peak_window=30_500, sample_interval=round(TICK * 1000))
    return p


def truth(memory: Callable[[float], float], a: float, b: float) -> float:
    return max(memory(k * TICK) for k in range(math.ceil(a / TICK), math.floor(b / TICK) + 1))


def spikes(rng: random.Random, end: float, boundaries: list[float]
           ) -> tuple[Callable[[float], float], dict[float, float]]:
    """1 GiB with one-sample spikes at least 130 s apart (two windows: none hides another),
    half of them one second before a scrape, the rest anywhere."""
    at: dict[float, float] = {}
    wanted = [s - 1.0 for s in rng.sample(boundaries, len(boundaries) // 2)]
    wanted += [rng.uniform(80, end - 80) for _ in range(len(wanted))]
    for t in wanted:
        t = math.floor(t / TICK) * TICK
        if 80 <= t <= end - 80 and all(abs(t - u) > 130 for u in at):
            at[t] = round(rng.uniform(2, 9), 3)
    return (lambda t: at.get(t, 1.0) * GiB), at


def honest(p, memory, a: float, b: float) -> bool:
    """What the collector says of [a, b] is true; True where it also says exact."""
    real = truth(memory, a, b)
    if p.exact:
        assert p.peak_bytes == real, (a, b)
        return True
    # at most the truth, or said to be "at most", or nothing known (NaN)
    assert not p.peak_bytes > real or p.peak_bytes == p.upper_bytes
    assert p.upper_bytes is None or p.upper_bytes >= real, (a, b)
    return False


@pytest.mark.parametrize("seed", range(4))
def test_two_replicas_at_60s_give_exact_peaks_on_defaults(seed):
    rng = random.Random(seed)
    end = 1500.0
    replicas = [Replica("10.0.0.1", 60, 7.25), Replica("10.0.0.2", 60, 7.25 + rng.uniform(1, 59))]
    memory, at = spikes(rng, end, [s for r in replicas for s in r.times(end)])
    assert len(at) >= 5
    run(memory, replicas, end)
    for t, v in at.items():  # a range around each spike, however short, of either replica
        for replica in replicas:
            a, b = t - rng.uniform(0, 60), t + rng.uniform(0, 60)
            p = peak(replica, a, b)
            assert (p.peak_bytes, p.exact, p.time) == (v * GiB, True, round((T0 + t) * 1000))
            assert honest(p, memory, a, b)
    for _ in range(30):  # and any range: never silently wrong
        a = rng.uniform(70, end - 200)
        b = a + rng.uniform(1, 180)
        for replica in replicas:
            honest(peak(replica, a, b), memory, a, b)


def test_a_fixed_30s_window_at_60s_says_what_it_cannot_know():
    rng = random.Random(7)
    end = 1500.0
    replica = Replica("10.0.0.1", 60, 7.25)
    memory, at = spikes(rng, end, replica.times(end))
    run(memory, [replica], end, follow=False)
    answers = [honest(peak(replica, t - 20, t + 20), memory, t - 20, t + 20) for t in at]
    assert not all(answers)  # half of every minute lies in no window: never called exact


def test_the_first_scrape_after_an_outage_reports_its_peak():
    memory = lambda t: (7 if t == 400.0 else 1) * GiB  # noqa: E731 - a spike while down
    replica = Replica("10.0.0.1", 60, 7.25, down=lambda t: 300 < t < 600)
    run(memory, [replica], 1200)
    p = peak(replica, 350, 450)
    assert (p.peak_bytes, p.exact) == (7 * GiB, True)
    assert p.time == round((T0 + 400) * 1000)
    (window,) = replica.held[WINDOW_METRIC]
    assert max(window.values) > 300 and window.values[-1] < 70  # back to the scrape gap


def test_replicas_behind_one_address_are_never_said_exact_when_not():
    # two replicas at 60 s that share an address look like one scraper every 30 s
    rng = random.Random(3)
    end = 1500.0
    replicas = [Replica("10.0.0.9", 60, 7.25), Replica("10.0.0.9", 60, 37.25)]
    memory, at = spikes(rng, end, [s for r in replicas for s in r.times(end)])
    run(memory, replicas, end)
    for t in at:
        for replica in replicas:
            honest(peak(replica, t - 20, t + 20), memory, t - 20, t + 20)


def test_the_window_follows_each_client_within_its_bounds():
    clock = Clock()
    log = ScrapeLog(clock=clock)
    assert log.longest_gap(600) == 0.0
    for t in (0, 15, 30, 45):
        clock.t = t
        log.scraped("fast")
    clock.t = 5
    log.scraped("slow")
    clock.t = 65
    log.scraped("slow")
    clock.t = 70
    assert log.longest_gap(600) == 60  # the slow one's gap, not the fast one's
    clock.t = 1000
    assert log.longest_gap(600) == 0.0  # both gone for longer than the horizon
    for k in range(MAX_CLIENTS + 10):
        log.scraped(f"scan-{k}")
    assert len(log._clients) == MAX_CLIENTS


def test_the_sampler_window_is_clamped_and_says_itself():
    source, clock = ScriptedSource(), Clock()
    log = ScrapeLog(clock=clock)
    sampler = Sampler(source, lambda: Target("w", None), interval=0.5, peak_window=30,
                      clock=clock, scrapes=log, longest_window=120)
    assert sampler.sample_once().peak_window == 30  # nobody scraped yet
    log.scraped("p")
    clock.t += 59.5
    assert sampler.sample_once().peak_window == 60  # since the scrape, plus one interval
    clock.t += 500
    assert sampler.sample_once().peak_window == 30  # gone for longer than the longest
    log.scraped("p")
    assert sampler.sample_once().peak_window == 120  # a 560 s gap, clamped
    fixed = Sampler(source, lambda: Target("w", None), interval=0.5, peak_window=45,
                    clock=clock, scrapes=log, longest_window=10)
    assert fixed.sample_once().peak_window == 45  # the longest never below the shortest
