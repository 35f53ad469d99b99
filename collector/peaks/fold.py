"""The peaks of one worker's GPUs, folded a piece of its range at a time (pure).

Each peak sample counts for the range, job and DAG at its stamp (see ``timing``); where a
larger value from outside the range may hide part of it, the peak says how high it may
still be (``upper_bytes``). Series of an exporter that does not date its peaks take the
older rule of ``samples.undated_sources``; a GPU without the peak gauge falls back to used
memory."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby

from dask_metrics.collector.model.columns import (
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    ROUND_TIME_METRIC,
    SAMPLES_METRIC,
    TOTAL_METRIC,
    USED_METRIC,
    WINDOW_METRIC,
)
from dask_metrics.collector.model.jobs import NO_NAMES, JobNames
from dask_metrics.collector.model.lifetimes import job_order
from dask_metrics.collector.model.series import Series, Timeline
from dask_metrics.collector.model.tables import GpuKey, gpu_order, gpu_series
from dask_metrics.collector.model.timespec import to_ms
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.peaks.samples import (
    DEFAULT_PEAK_WINDOW,
    Capacity,
    exporter_series,
    job_spans,
    total_at,
    undated_sources,
    within,
)
from dask_metrics.collector.peaks.timing import (
    Cover,
    cover,
    dated_readings,
    peak_dates,
    reaches,
    stamps_ms,
    upper_bound,
)


def gpu_peaks(worker: str, series_by_metric: Mapping[str, Iterable[Series]],
              activity: Timeline, max_age: int, by_job: bool = False,
              since: int | None = None, peak_window: int = to_ms(DEFAULT_PEAK_WINDOW),
              names: JobNames = NO_NAMES, until: int | None = None,
              sample_interval: int = 500) -> list[Peak]:
    """Peaks of one worker's GPUs in [since, until] (ms; pure). The first reading at the
    maximum is reported.

    With ``by_job`` there is one peak per GPU and job that ran on the worker (readings while
    it was idle are left out); the DAG is the one running at the peak. Dated peak samples
    (see ``timing``) count at their stamp; undated ones by the older rule of
    ``undated_sources``. ``peak_window`` (ms): how far back a peak sample surely reaches, the
    exporter's window plus its sampling interval (``worker_series.peak_windows``), for the bounds
    and that rule; ``sample_interval`` (ms): the exporter's, with which its
    dask_gpu_exporter_samples_total in ``series_by_metric`` tells how far back a window
    reaches after a restart. ``names`` names the jobs (jobs.csv's rows).
    """
    return peaks_over(worker, series_by_metric, [(activity, by_job)], max_age, since=since,
                      peak_window=peak_window, names=names, until=until,
                      sample_interval=sample_interval)[0]


def peaks_over(worker: str, series_by_metric: Mapping[str, Iterable[Series]],
               timelines: Sequence[tuple[Timeline, bool]], max_age: int, *,
               since: int | None = None, peak_window: int = to_ms(DEFAULT_PEAK_WINDOW),
               names: JobNames = NO_NAMES, until: int | None = None,
               sample_interval: int = 500) -> list[list[Peak]]:
    """``gpu_peaks`` of one worker for each (timeline, by_job), its range read whole: the
    series are grouped by GPU, dated and their windows covered once for all (the report
    asks by DAG and by GPU)."""
    fold = PeakFold(worker, [by_job for _, by_job in timelines], max_age, since=since,
                    until=until, peak_window=peak_window, sample_interval=sample_interval,
                    names=names)
    fold.add(series_by_metric, [activity for activity, _ in timelines], fold.lo, fold.hi + 1)
    return fold.result()


DATED, GAUGE, USED = "dated", "gauge", "used"
"""The rules a GPU's readings follow: dated peak samples and used memory (``timing``), the
undated gauge (``undated_sources``), used memory alone (no peak gauge at all)."""


NO_COVER = Cover([], [], [], 0, [], [], [], True)


LATER = 2**62  # ms past any time: an open range's edge, a GPU's last scrape with more to come


class _Gpu:
    """What one GPU of the worker carries from one piece of the range to the next."""

    __slots__ = ("dated", "first", "first_at", "last", "peaked", "totals", "totals_to")

    def __init__(self) -> None:
        self.first: int | None = None  # its first peak window's start
        self.first_at: int | None = None  # its first peak scrape
        self.last = -LATER  # its last peak scrape so far
        self.dated = False  # a peak stamp, in any piece
        self.peaked = False  # a peak sample, in any piece
        self.totals: Capacity = []
        self.totals_to = -LATER  # the last total scrape taken into ``totals``

    def take_totals(self, totals: tuple[list[int], list[float]] | None) -> None:
        """The capacity samples of a piece, each change kept (pieces overlap: once)."""
        for t, v in zip(*(totals or ([], [])), strict=True):
            if t <= self.totals_to:
                continue
            self.totals_to = t
            prev = self.totals[-1][1] if self.totals else None
            if prev is None or not (v == prev or (v != v and prev != prev)):
                self.totals.append((t, v))


Best = tuple[float, int, tuple[str, str]]  # (value, -time, (job, dag))


class _Found:
    """What one timeline's peaks of one GPU carry from piece to piece."""

    __slots__ = ("best", "bounds", "first", "pending")

    def __init__(self) -> None:
        self.best: dict[str, dict[str, Best]] = {}  # rule: {job key: the best reading}
        self.bounds: dict[str, float] = {}  # job key: the highest its windows may hide
        # {(the GPU's last scrape then, job key): (bound if that is its last, if not)}
        self.pending: dict[tuple[int, str], tuple[float, float]] = {}
        self.first: tuple[int, tuple[str, str]] | None = None  # by GPU: its first moment


class PeakFold:
    """The peaks of one worker (``gpu_peaks``, for each of ``by_jobs``' timelines) over
    consecutive pieces of its range, each piece's samples let go once it is added: what a
    long range holds is the worker's GPUs' best readings, bounds and capacity changes, not
    its samples. The peaks are those of the range read whole (``peaks_over``): a piece's
    readings are those dated inside it, its bounds those of its moments (every window that
    covers one is a sample of the piece's read, which reaches a peak window past it), each
    asked of the job's whole span and the GPU's whole data (its first window, carried; its
    last scrape, known at the end: a bound that depends on it is kept both ways until
    then); the rule of an exporter that does not date its peaks is chosen at the end too.
    Exact for peak stamps up to a scrape interval off their scrape."""

    def __init__(self, worker: str, by_jobs: Sequence[bool], max_age: int, *,
                 since: int | None = None, until: int | None = None,
                 peak_window: int = to_ms(DEFAULT_PEAK_WINDOW), sample_interval: int = 500,
                 names: JobNames = NO_NAMES) -> None:
        self.worker, self.by_jobs, self.max_age, self.names = worker, by_jobs, max_age, names
        self.since, self.peak_window, self.sample_interval = since, peak_window, sample_interval
        self.lo = -LATER if since is None else since
        self.hi = LATER if until is None else until
        self._gpus: dict[GpuKey, _Gpu] = {}
        self._found: list[dict[GpuKey, _Found]] = [{} for _ in by_jobs]
        self._starts: list[dict[str, tuple[int, tuple[str, str]]]] = [{} for _ in by_jobs]

    def add(self, series_by_metric: Mapping[str, Iterable[Series]],
            activities: Sequence[Timeline], a: int, b: int, margin: int | None = None,
            final: bool = True) -> None:
        """The piece of the range from ``a`` to ``b`` (ms; the next piece's start, or the
        range's end + 1): its samples from ``a`` (the first piece: from the range's read
        start) to a peak window past ``b``, and per timeline what ran from ``a - margin``
        (less ``max_age``) to ``b + margin``, ``margin`` at least a peak window (None: the
        whole range). Pieces come in order, each at least a peak window long, the
        ``final`` one last."""
        lo, hi, age = self.lo, self.hi, self.max_age
        moments = (a, min(b, hi))
        rounds = exporter_series(series_by_metric.get(SAMPLES_METRIC, ()))
        rounds_at = exporter_series(series_by_metric.get(ROUND_TIME_METRIC, ()))
        windows = exporter_series(series_by_metric.get(WINDOW_METRIC, ()))
        # the exporter dates every GPU's used memory alike: at the end of its sampling round
        ended = stamps_ms(rounds_at, rounds_at) if rounds_at else None
        local = {key: metrics for key, metrics in gpu_series(series_by_metric).items()
                 if key[0] or key[1]}  # not the exporter's own series
        edges = (lo, hi) if margin is None else (max(lo, a - margin), min(hi, b + margin))
        spans = []
        for k, (activity, by_job) in enumerate(zip(activities, self.by_jobs, strict=True)):
            found = {"": [(lo, hi)]} if not by_job else {
                key: kept for key, mine in job_spans(activity, age, *edges).items()
                if (kept := [(x, y) for x, y in mine if x < moments[1] and y > a])}
            spans.append(found)
            for key, mine in found.items():
                # a span from before the piece is the earlier piece's: there it starts
                t = max(mine[0][0], a)
                if by_job and (key not in self._starts[k] or t < self._starts[k][key][0]):
                    self._starts[k][key] = (t, activity.at(t, age))
        for key in [*local, *(key for key in self._gpus if key not in local)]:
            g = self._gpus.setdefault(key, _Gpu())
            metrics = local.get(key, {})
            g.take_totals(metrics.get(TOTAL_METRIC))
            peak, known, latest = metrics.get(PEAK_METRIC), NO_COVER, -LATER
            dates = None
            if peak:
                dates = peak_dates(metrics)
                reach = reaches(peak[0], rounds, self.peak_window, self.sample_interval,
                                windows)
                known = cover(metrics, reach, dates)
                if g.first is None:
                    g.first, g.first_at = peak[0][0] - reach[0], peak[0][0]
                g.last = max(g.last, peak[0][-1])
                g.peaked = True
                g.dated = g.dated or bool(metrics.get(PEAK_TIME_METRIC))
                if not final:
                    latest = max((d for st in known.stretches for *_, d in st if d is not None),
                                 default=-LATER)
            rules = self._readings(g, metrics, rounds_at, ended, dates, a, b - 1)
            for k, activity in enumerate(activities):
                self._fold(k, key, g, rules, activity, spans[k], known, moments,
                           final or (g.last >= moments[1] and latest <= g.last))

    def _readings(self, g: _Gpu, metrics: Mapping[str, tuple[list[int], list[float]]],
                  rounds_at: tuple[list[int], list[float]] | None,
                  ended: list[int | None] | None, dates: list[int | None] | None,
                  lo: int, hi: int) -> dict[str, tuple[list[int], list[float]]]:
        """A piece's readings dated in [lo, hi] by each rule its GPU may turn out to follow
        (the undated ones only while no stamp was seen)."""
        used = metrics.get(USED_METRIC)
        same = ended is not None and used is not None and rounds_at is not None \
            and used[0] == rounds_at[0]
        rules = {DATED: dated_readings(metrics, lo, hi, rounds_at, dates,
                                       ended if same else None)}
        if not g.dated:
            rules[GAUGE] = within(undated_sources(metrics, self.since, self.peak_window), lo, hi)
            rules[USED] = within(used, lo, hi)
        return rules

    def _fold(self, k: int, key: GpuKey, g: _Gpu,
              rules: Mapping[str, tuple[list[int], list[float]]], activity: Timeline,
              spans: Mapping[str, list[tuple[int, int]]], known: Cover,
              moments: tuple[int, int], settled: bool) -> None:
        """One piece of one GPU into timeline ``k``'s peaks: its best reading per job key
        and rule, and the bounds of its moments (``settled``: the same whatever the GPU's
        last scrape turns out to be)."""
        by_job = self.by_jobs[k]
        found = self._found[k].setdefault(key, _Found())
        if not by_job and found.first is None and g.first_at is not None:
            t = max(self.lo, g.first_at)
            found.first = (t, activity.at(t, self.max_age))
        local = {rule: self._best_in(readings, activity, by_job)
                 for rule, readings in rules.items()}
        for rule, mine in local.items():
            best = found.best.setdefault(rule, {})
            for job, got in mine.items():
                if job not in best or got[:2] > best[job][:2]:
                    best[job] = got
        if g.first is None:
            return  # no peak sample yet: its data starts after these moments
        dated = {job: got[0] for job, got in local[DATED].items()}
        for job, mine in spans.items():
            at = dated.get(job, -math.inf)

            def bound(last: int, mine: list[tuple[int, int]] = mine, at: float = at) -> float:
                return max(upper_bound(known, x, y, at, (g.first, last), moments)
                           for x, y in mine)

            if settled:
                found.bounds[job] = max(found.bounds.get(job, -math.inf), bound(g.last))
            else:
                ends, later = found.pending.get((g.last, job), (-math.inf, -math.inf))
                found.pending[g.last, job] = (max(ends, bound(g.last)), max(later, bound(LATER)))

    def _best_in(self, readings: tuple[list[int], list[float]], activity: Timeline,
                 by_job: bool) -> dict[str, Best]:
        """The first reading at the maximum per job key (by_job: readings while the worker
        was idle left out)."""
        times, values = readings
        best: dict[str, Best] = {}
        pos = 0
        for state, run in groupby(activity.at_each(times, self.max_age)):
            end = pos + len(list(run))  # a state holds for many samples in a row
            job = state[0] if by_job else ""
            if job or not by_job:
                top = max(values[pos:end])  # its first sample at the maximum
                i = values.index(top, pos, end)
                if job not in best or (top, -times[i]) > best[job][:2]:
                    best[job] = (top, -times[i], state)
            pos = end
        return best
    def result(self) -> list[list[Peak]]:
        """The peaks of every timeline, once the final piece is added."""
        return [self._peaks(k) for k in range(len(self.by_jobs))]

    def _peaks(self, k: int) -> list[Peak]:
        by_job, hi = self.by_jobs[k], self.hi
        peaks = []
        for key in sorted(self._found[k], key=gpu_order):
            g, found = self._gpus[key], self._found[k][key]
            for (last, job), (ends, later) in found.pending.items():
                found.bounds[job] = max(found.bounds.get(job, -math.inf),
                                        ends if last == g.last else later)
            dated = g.dated and g.peaked
            best = found.best.get(DATED if dated else GAUGE if g.peaked else USED, {})

            def at_most(job: str, t: int, state: tuple[str, str], g: _Gpu = g,
                        found: _Found = found, key: GpuKey = key) -> Peak:
                """No reading is dated inside the job's spans: what the windows say; where
                no moment of them lies in the GPU's data (it had none then), unknown."""
                bound = found.bounds.get(job, -math.inf)
                bound = max(bound, 0.0) if bound > -math.inf else math.inf
                return self._peak(key, g, bound if math.isfinite(bound) else math.nan, t,
                                  state, bound, True)

            if not best and not by_job:
                if dated and found.first is not None and g.first is not None and g.first < hi:
                    peaks.append(at_most("", *found.first))  # shorter than a scrape
                continue
            unseen = {}  # jobs that ran with no reading dated inside their spans
            if dated and by_job:
                unseen = {job: at_most(job, *start) for job, start in self._starts[k].items()
                          if job not in best and start[0] < g.last}
            for job in sorted([*best, *unseen], key=job_order):
                if job in unseen:
                    peaks.append(unseen[job])
                    continue
                v, t, state = best[job][0], -best[job][1], best[job][2]
                upper = None
                if dated:
                    bound = max(v, found.bounds.get(job, -math.inf))
                    upper = bound if bound > v else None
                peaks.append(self._peak(key, g, v, t, state, upper, dated))
        return peaks

    def _peak(self, key: GpuKey, g: _Gpu, value: float, t: int, state: tuple[str, str],
              upper: float | None, dated: bool) -> Peak:
        job, dag = state
        return Peak(self.worker, key[0], key[1], value, total_at(g.totals, t), t, job, dag,
                    self.names.names.get(job, ""), self.names.phase(job, dag), upper, dated)
