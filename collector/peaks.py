"""``peaks``: the peak GPU memory of each worker's GPUs, when it happened and during which
job/DAG, from ``dask_gpu_memory_peak_bytes`` raw samples.

That gauge is the maximum of every internal exporter sample over its trailing peak window,
so a spike between two scrapes still counts, and ``dask_gpu_memory_peak_timestamp_seconds``
dates it: each peak sample counts for the range, job and DAG at its stamp (see
``peaktime``), so a spike before ``since`` is left out, one just before ``until`` is counted
(from the first scrape after ``until``, which is why the range is fetched a window further),
and each spike is credited to what ran when it happened. Where a larger value from outside
the range may hide part of it, the peak says how high it may still be (``upper_bytes``).

Series of an exporter that does not date its peaks take the older rule: in the first peak
window after ``since`` only gauge values above the first one count, with the raw
``dask_gpu_memory_used_bytes`` samples; a GPU without the peak gauge falls back to used
memory.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, groupby

from dask_metrics.collector.background import gc_paused, prefetched
from dask_metrics.collector.batches import (
    batch_chunk,
    range_batches,
    samples_per_gpu,
    worker_batches,
)
from dask_metrics.collector.columns import (
    NEXT_PEAK_METRIC,
    NEXT_PEAK_TIME_METRIC,
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    ROUND_TIME_METRIC,
    SAMPLES_METRIC,
    TOTAL_METRIC,
    USED_METRIC,
    WINDOW_METRIC,
)
from dask_metrics.collector.discovery import Progress, find_workers
from dask_metrics.collector.fetch import (
    Scope,
    data_span,
    fetch_cluster,
    fetch_gpu_series,
    fetch_jobs,
    fetch_worker_activity,
    lookahead,
    peak_windows,
    read_span,
)
from dask_metrics.collector.jobs import NO_NAMES, JobNames
from dask_metrics.collector.lifetimes import job_order
from dask_metrics.collector.peak import Peak
from dask_metrics.collector.peaktime import (
    Cover,
    cover,
    dated_readings,
    peak_dates,
    reaches,
    stamps_ms,
    upper_bound,
)
from dask_metrics.collector.pieces import pieces
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE, check_range
from dask_metrics.collector.series import Series, Timeline, join
from dask_metrics.collector.tables import GpuKey, gpu_order, gpu_series
from dask_metrics.collector.timespec import to_ms
from dask_metrics.contract import REPLICA_LABELS

BY = ("gpu", "job")
DEFAULT_PEAK_WINDOW = 30.0
"""Seconds: the exporter's default trailing window of dask_gpu_memory_peak_bytes, taken for
exporters that do not say theirs (dask_gpu_exporter_peak_window_seconds)."""
LONGEST_PEAK_WINDOW = 3600.0
"""Seconds: the longest window a range is fetched past its end for (the exporter's limit)."""
PEAK_DATING = (PEAK_TIME_METRIC, NEXT_PEAK_METRIC, NEXT_PEAK_TIME_METRIC, SAMPLES_METRIC,
               ROUND_TIME_METRIC, WINDOW_METRIC)
"""The series that date the peak gauge's samples and bound what they hide (peaktime)."""
PEAK_METRICS = (PEAK_METRIC, USED_METRIC, TOTAL_METRIC, *PEAK_DATING)


Capacity = list[tuple[int, float]]
"""A GPU's total memory where it changed: (the first scrape of a value, the value)."""


def _total_at(totals: Capacity, t: int) -> float | None:
    """The capacity at ``t``: the last total at or before it, else the first one after."""
    if not totals:
        return None
    i = bisect_right(totals, (t, math.inf)) - 1
    return totals[max(i, 0)][1]


def _sources(metrics: Mapping[str, tuple[list[int], list[float]]], since: int | None,
             peak_window: int) -> tuple[list[int], list[float]]:
    """(time, bytes) to take the peak of, for a GPU whose exporter has the peak gauge but
    does not date it: the gauge, except in the first peak window after ``since``. There the
    first gauge sample, s1, may carry a peak from before ``since``; a later one, at t,
    covers (t - window, t], whose part before ``since`` lies within s1's window, so a value
    above s1's was reached after s1, in the session: those are kept, with the raw
    used-memory samples, and the rest left out."""
    peak, used = metrics.get(PEAK_METRIC) or ([], []), metrics.get(USED_METRIC)
    if since is None:
        return peak
    cut = since + peak_window
    first, i = bisect_left(peak[0], since), bisect_left(peak[0], cut)
    carried = peak[1][first] if first < i else math.inf
    early = [(t, v) for t, v in zip(peak[0][first + 1:i], peak[1][first + 1:i], strict=True)
             if v > carried]
    if used:
        lo, hi = bisect_left(used[0], since), bisect_left(used[0], cut)
        early += zip(used[0][lo:hi], used[1][lo:hi], strict=True)
    early.sort()
    return [t for t, _ in early] + peak[0][i:], [v for _, v in early] + peak[1][i:]


def _within(samples: tuple[list[int], list[float]] | None, lo: int, hi: int
            ) -> tuple[list[int], list[float]]:
    """The samples in [lo, hi], NaN left out."""
    if not samples:
        return [], []
    kept = [(t, v) for t, v in zip(*samples, strict=True) if lo <= t <= hi and v == v]
    return [t for t, _ in kept], [v for _, v in kept]


def gpu_peaks(worker: str, series_by_metric: Mapping[str, Iterable[Series]],
              activity: Timeline, max_age: int, by_job: bool = False,
              since: int | None = None, peak_window: int = to_ms(DEFAULT_PEAK_WINDOW),
              names: JobNames = NO_NAMES, until: int | None = None,
              sample_interval: int = 500) -> list[Peak]:
    """Peaks of one worker's GPUs in [since, until] (ms; pure). The first reading at the
    maximum is reported.

    With ``by_job`` there is one peak per GPU and job that ran on the worker (readings while
    it was idle are left out); the DAG is the one running at the peak. Dated peak samples
    (see ``peaktime``) count at their stamp; undated ones by the older rule of
    ``_sources``. ``peak_window`` (ms): how far back a peak sample surely reaches, the
    exporter's window plus its sampling interval (``fetch.peak_windows``), for the bounds
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
"""The rules a GPU's readings follow: dated peak samples and used memory (peaktime), the
undated gauge (``_sources``), used memory alone (no peak gauge at all)."""
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
        rounds = _exporter_series(series_by_metric.get(SAMPLES_METRIC, ()))
        rounds_at = _exporter_series(series_by_metric.get(ROUND_TIME_METRIC, ()))
        windows = _exporter_series(series_by_metric.get(WINDOW_METRIC, ()))
        # the exporter dates every GPU's used memory alike: at the end of its sampling round
        ended = stamps_ms(rounds_at, rounds_at) if rounds_at else None
        local = {key: metrics for key, metrics in gpu_series(series_by_metric).items()
                 if key[0] or key[1]}  # not the exporter's own series
        edges = (lo, hi) if margin is None else (max(lo, a - margin), min(hi, b + margin))
        spans = []
        for k, (activity, by_job) in enumerate(zip(activities, self.by_jobs, strict=True)):
            found = {"": [(lo, hi)]} if not by_job else {
                key: kept for key, mine in _spans(activity, age, *edges).items()
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
            rules[GAUGE] = _within(_sources(metrics, self.since, self.peak_window), lo, hi)
            rules[USED] = _within(used, lo, hi)
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
        return Peak(self.worker, key[0], key[1], value, _total_at(g.totals, t), t, job, dag,
                    self.names.names.get(job, ""), self.names.phase(job, dag), upper, dated)


def tail_of(windows: Mapping[str, tuple[int, int]], default: int) -> int:
    """How far (ms) past a range's end its peak samples are fetched: the longest reach of
    the exporters' windows (``fetch.peak_windows``), ``default`` where none says."""
    longest = max((reach for reach, _ in windows.values()), default=default)
    return min(longest, to_ms(LONGEST_PEAK_WINDOW))


def window_keywords(window: tuple[int, int]) -> dict[str, int]:
    """gpu_peaks' keywords for a worker's (reach, sampling interval), in ms."""
    return {"peak_window": window[0], "sample_interval": window[1]}


def _exporter_series(series: Iterable[Series]) -> tuple[list[int], list[float]] | None:
    """One series of the worker's exporter (one piece per exporter process) as one."""
    pieces = [s for s in series if s.times]
    if not pieces:
        return None
    return (pieces[0].times, pieces[0].values) if len(pieces) == 1 else join(pieces)


def _spans(activity: Timeline, max_age: int, lo: int, hi: int
           ) -> dict[str, list[tuple[int, int]]]:
    """{job: the stretches of [lo, hi] the timeline gives it}: from each scheduler scrape
    that saw it to the next scrape (at most ``max_age`` later), adjacent ones joined."""
    times = activity.times
    spans: dict[str, list[tuple[int, int]]] = {}
    for k, (state, t) in enumerate(zip(activity.states, times, strict=True)):
        a = max(t, lo)
        b = min(times[k + 1] if k + 1 < len(times) else hi, t + max_age, hi)
        if not state[0] or a >= b:
            continue
        mine = spans.setdefault(state[0], [])
        if mine and mine[-1][1] == a:
            mine[-1] = (mine[-1][0], b)
        else:
            mine.append((a, b))
    return spans


# No reference cycles are created; the decoded JSON's many lists would trigger repeated full
# collections.
@gc_paused()
def peaks(client: PrometheusClient, since: float, until: float, *,
          workers: Sequence[str] | None = None, by: str = "gpu",
          max_age: float = DEFAULT_MAX_AGE, chunk: float = DEFAULT_CHUNK,
          progress: Progress | None = None, cluster: str | None = None,
          replica_labels: Sequence[str] = REPLICA_LABELS, any_cluster: bool = False,
          peak_window: float = DEFAULT_PEAK_WINDOW) -> list[Peak]:
    """Peak memory per worker and GPU in [since, until] (unix seconds); ``by="job"``: per
    worker, GPU and job. The samples of two batches of workers are in memory at a time (the
    one dated, the next one read; ``progress`` is called as a batch is read), of a range
    longer than a ``chunk`` a chunk of it at a time (PeakFold), so that memory holds the
    same whatever the number of workers and the length of the range. ``cluster``,
    ``replica_labels``, ``any_cluster`` as for ``export.find_workers``; ``peak_window``: the
    peak window (seconds) of exporters that do not say theirs.

    The samples are fetched up to one peak window past ``until`` (never past now): a spike
    in the range's last scrape interval is reported by the first scrape after it."""
    check_range(since, until)
    if by not in BY:
        raise ValueError(f"unknown grouping {by!r} (known: {', '.join(BY)})")
    begin, until_ms, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    named = Scope(None if any_cluster else cluster, tuple(replica_labels))
    windows = peak_windows(client, begin, until_ms, named)
    default = (to_ms(peak_window), 0)
    tail = tail_of(windows, default[0])
    reach = min(until_ms + tail, max(to_ms(time.time()), until_ms))
    first, last = data_span(client, begin, reach, chunk_ms, None, named)  # the data
    start, end = read_span(first, last, begin, reach, max(age, tail))  # what its edges reach
    # the tail too: a session shorter than a scrape has its first samples there
    scope, chosen = find_workers(client, start, end, chunk_ms, workers, cluster,
                                 replica_labels, any_cluster)
    timeline = fetch_cluster(client, start - age, lookahead(end, age), chunk_ms, scope)
    # the range's jobs (start, end: the GPUs' data, whose dated peaks reach before it)
    job_names = JobNames.from_rows(fetch_jobs(client, begin, until_ms, chunk_ms, age, scope))
    per_gpu = samples_per_gpu(client, start, end, chunk_ms, len(PEAK_METRICS), None, scope)
    # a range is folded (PeakFold) a piece at a time, as many chunks long as one worker's
    # answer holds (the fewer pieces, the less read twice around their edges), a batch's
    # piece in memory whatever the range; a range of one piece is read whole, in as few
    # queries as its answers allow
    widest = max(chosen, key=lambda w: len(w.gpus), default=None)
    length = batch_chunk([widest], per_gpu, chunk_ms) if widest else chunk_ms
    parts = _parts(begin, until_ms, start, end, max(length, tail))
    whole = len(parts) == 1
    batches = (range_batches(chosen, per_gpu, start, end, chunk_ms) if whole
               else worker_batches(chosen, per_gpu * length / chunk_ms))
    firsts = list(accumulate([0, *map(len, batches)]))
    steps = [(b, k) for b in range(len(batches)) for k in range(len(parts))]
    margin = 2 * tail  # what ran around a piece: the spans its windows' stamps lie in

    def fetch(at: tuple[int, int]) -> tuple[list[str], dict[str, dict[str, list[Series]]],
                                             dict[str, Timeline]]:
        b, k = at
        names = [w.name for w in batches[b]]
        if progress:
            progress(firsts[b] + len(names) * k / len(parts), len(chosen), names[0], None)
        if whole:
            wide = batch_chunk(batches[b], per_gpu, chunk_ms)
            return (names, fetch_gpu_series(client, names, PEAK_METRICS, start, end, wide,
                                            None, age, scope),
                    fetch_worker_activity(client, names, timeline, start - age, end, wide,
                                          age, scope))
        a, z = parts[k]
        ran = (a - margin - age, z + margin)
        known = timeline.between(ran[0], lookahead(ran[1], age))
        return (names, fetch_gpu_series(client, names, PEAK_METRICS, start if k == 0 else a,
                                        min(end, z + tail), length, None, age, scope),
                fetch_worker_activity(client, names, known, *ran, length, age, scope))

    found: list[Peak] = []
    folds: dict[str, PeakFold] = {}
    # the next batch (or chunk) is read while this one's peaks are dated: Prometheus and
    # the collector work at the same time
    for (_, k), (names, series, activity) in zip(steps, prefetched(fetch, steps),
                                                 strict=True):
        for name in names:
            fold = folds.setdefault(name, PeakFold(
                name, [by == "job"], age, since=begin, until=until_ms, names=job_names,
                **window_keywords(windows.get(name, default))))
            fold.add(series[name], [activity[name]], *parts[k],
                     margin=None if whole else margin, final=k == len(parts) - 1)
            if k == len(parts) - 1:
                found += folds.pop(name).result()[0]
    if progress:
        progress(len(chosen), len(chosen), "", None)
    return found


def _parts(begin: int, until: int, start: int, end: int, length: int
           ) -> list[tuple[int, int]]:
    """PeakFold's pieces of [begin, until] (ms), each from its start to the next one's
    (the last to until + 1): chunks of ``length`` where the data (read from ``start`` to
    ``end``) lies, a short last one riding with the one before (pieces.pieces)."""
    lo = min(max(begin, start), until)
    cut = [(p.lo, p.hi + 1) for p in pieces(lo, max(min(until, end), lo), start, end,
                                             length, 0)]
    cut[0] = (begin, cut[0][1])
    cut[-1] = (cut[-1][0], until + 1)
    return cut
