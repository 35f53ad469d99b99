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
from typing import NamedTuple

from dask_metrics.collector.background import gc_paused, prefetched
from dask_metrics.collector.batches import batch_chunk, range_batches, samples_per_gpu
from dask_metrics.collector.columns import (
    NEXT_PEAK_METRIC,
    NEXT_PEAK_TIME_METRIC,
    PEAK_METRIC,
    PEAK_TIME_METRIC,
    ROUND_TIME_METRIC,
    SAMPLES_METRIC,
    TOTAL_METRIC,
    USED_METRIC,
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
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE, check_range
from dask_metrics.collector.series import Series, Timeline, join
from dask_metrics.collector.tables import gpu_series
from dask_metrics.collector.timespec import to_ms
from dask_metrics.contract import REPLICA_LABELS

BY = ("gpu", "job")
DEFAULT_PEAK_WINDOW = 30.0
"""Seconds: the exporter's default trailing window of dask_gpu_memory_peak_bytes, taken for
exporters that do not say theirs (dask_gpu_exporter_peak_window_seconds)."""
LONGEST_PEAK_WINDOW = 3600.0
"""Seconds: the longest window a range is fetched past its end for (the exporter's limit)."""
PEAK_DATING = (PEAK_TIME_METRIC, NEXT_PEAK_METRIC, NEXT_PEAK_TIME_METRIC, SAMPLES_METRIC,
               ROUND_TIME_METRIC)
"""The series that date the peak gauge's samples and bound what they hide (peaktime)."""
PEAK_METRICS = (PEAK_METRIC, USED_METRIC, TOTAL_METRIC, *PEAK_DATING)


def _total_at(totals: Sequence[tuple[int, float]], t: int) -> float | None:
    """The capacity at ``t``: the last total at or before it, else the first one after."""
    if not totals:
        return None
    i = bisect_right(totals, (t, math.inf)) - 1
    return totals[max(i, 0)][1]


def _sources(metrics: Mapping[str, tuple[list[int], list[float]]], since: int | None,
             peak_window: int) -> tuple[list[int], list[float]]:
    """(time, bytes) to take the peak of: the peak gauge, except in the first peak window
    after ``since``. There the first gauge sample, s1, may carry a peak from before
    ``since``; a later one, at t, covers (t - window, t], whose part before ``since`` lies
    within s1's window, so a value above s1's was reached after s1, in the session: those are
    kept, with the raw used-memory samples, and the rest left out."""
    peak, used = metrics.get(PEAK_METRIC), metrics.get(USED_METRIC)
    if not peak:
        return used or ([], [])
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


class _Readings(NamedTuple):
    """One GPU's readings in the range, dated, with what its peak windows cover."""

    gpu: str
    uuid: str
    known: Cover | None  # None without peak samples
    totals: list[tuple[int, float]]
    dated: bool
    times: list[int]
    values: list[float]


def peaks_over(worker: str, series_by_metric: Mapping[str, Iterable[Series]],
               timelines: Sequence[tuple[Timeline, bool]], max_age: int, *,
               since: int | None = None, peak_window: int = to_ms(DEFAULT_PEAK_WINDOW),
               names: JobNames = NO_NAMES, until: int | None = None,
               sample_interval: int = 500) -> list[list[Peak]]:
    """``gpu_peaks`` of one worker for each (timeline, by_job): the series are grouped by
    GPU, dated and their windows covered once for all (the report asks by DAG and by GPU)."""
    rounds = _exporter_series(series_by_metric.get(SAMPLES_METRIC, ()))
    rounds_at = _exporter_series(series_by_metric.get(ROUND_TIME_METRIC, ()))
    lo = -(2**62) if since is None else since
    hi = 2**62 if until is None else until
    # the exporter dates every GPU's used memory alike: at the end of its sampling round
    ended = stamps_ms(rounds_at, rounds_at) if rounds_at else None
    readings = []
    for (gpu, uuid), metrics in gpu_series(series_by_metric).items():
        if not gpu and not uuid:
            continue  # the exporter's own series
        dates = peak_dates(metrics) if metrics.get(PEAK_METRIC) else None
        known = cover(metrics, reaches(metrics[PEAK_METRIC][0], rounds, peak_window,
                                       sample_interval), dates) if dates is not None else None
        totals = list(zip(*metrics.get(TOTAL_METRIC, ([], [])), strict=True))
        dated = bool(metrics.get(PEAK_TIME_METRIC)) and dates is not None
        if dated:
            used = metrics.get(USED_METRIC)
            same = ended is not None and used is not None and used[0] == rounds_at[0]
            times, values = dated_readings(metrics, lo, hi, rounds_at, dates,
                                           ended if same else None)
        else:
            times, values = _undated(metrics, since, hi, peak_window)
        readings.append(_Readings(gpu, uuid, known, totals, dated, times, values))
    return [_peaks_on(worker, readings, activity, by_job, max_age, lo, hi, names)
            for activity, by_job in timelines]


def _peaks_on(worker: str, readings: Sequence[_Readings], activity: Timeline, by_job: bool,
              max_age: int, lo: int, hi: int, names: JobNames) -> list[Peak]:
    job_spans = _spans(activity, max_age, lo, hi) if by_job else {}
    peaks = []
    for reading in readings:
        gpu, uuid, known, totals, dated, times, values = reading

        def at_most(spans: Sequence[tuple[int, int]], t: int, reading: _Readings = reading
                    ) -> Peak:
            """No reading is dated inside ``spans``: what the windows say (see Peak)."""
            return _at_most(worker, reading, spans, activity.at(t, max_age), t, names)

        if not times and not by_job:
            if dated and known and known.times[0] - known.reach[0] < hi:  # shorter than a
                peaks.append(at_most([(lo, hi)], max(lo, known.times[0])))  # scrape
            continue
        states = activity.at_each(times, max_age)
        best: dict[str, tuple[float, int, int]] = {}  # job: (peak, -time, position)
        pos = 0
        for state, run in groupby(states):  # a state holds for many samples in a row
            end = pos + len(list(run))
            job = state[0] if by_job else ""
            if job or not by_job:
                top = max(values[pos:end])  # its first sample at the maximum
                i = values.index(top, pos, end)
                if job not in best or (top, -times[i]) > best[job][:2]:
                    best[job] = (top, -times[i], i)
            pos = end
        unseen = {}  # jobs that ran with no reading dated inside their spans
        if dated and known:
            unseen = {key: at_most(spans, spans[0][0]) for key, spans in job_spans.items()
                      if key not in best and spans[0][0] < known.times[-1]}
        for key in sorted([*best, *unseen], key=job_order):
            if key in unseen:
                peaks.append(unseen[key])
                continue
            i = best[key][2]
            t, v, (job, dag) = times[i], values[i], states[i]
            upper = None
            if dated and known:
                spans = [(lo, hi)] if not by_job else job_spans.get(key, [])
                bound = max((upper_bound(known, a, b, v) for a, b in spans), default=v)
                upper = bound if bound > v else None
            peaks.append(Peak(worker, gpu, uuid, v, _total_at(totals, t), t, job, dag,
                              names.names.get(job, ""), names.phase(job, dag), upper, dated))
    return peaks


def _at_most(worker: str, reading: _Readings, spans: Sequence[tuple[int, int]],
             state: tuple[str, str], t: int, names: JobNames) -> Peak:
    """The peak of a GPU in ``spans`` where no reading is dated inside them: the highest
    its windows may hide there, as a bound (Peak: peak_bytes == upper_bytes)."""
    assert reading.known is not None
    bound = max(upper_bound(reading.known, a, b, 0.0) for a, b in spans)
    job, dag = state
    return Peak(worker, reading.gpu, reading.uuid, bound if math.isfinite(bound) else math.nan,
                _total_at(reading.totals, t), t, job, dag, names.names.get(job, ""),
                names.phase(job, dag), bound)


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


def _undated(metrics: Mapping[str, tuple[list[int], list[float]]], since: int | None,
             hi: int, peak_window: int) -> tuple[list[int], list[float]]:
    """The readings of an exporter that does not date its peaks, up to ``hi``, NaN left out."""
    times, values = _sources(metrics, since, peak_window)
    kept = [(t, v) for t, v in zip(times, values, strict=True) if t <= hi and not math.isnan(v)]
    return [t for t, _ in kept], [v for _, v in kept]


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
    one dated, the next one read; ``progress`` is called as a batch is read). ``cluster``,
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
    batches = range_batches(chosen, per_gpu, start, end, chunk_ms)
    firsts = list(accumulate([0, *map(len, batches)]))

    def fetch(b: int) -> tuple[list[str], dict[str, dict[str, list[Series]]],
                               dict[str, Timeline]]:
        names = [w.name for w in batches[b]]
        if progress:
            progress(firsts[b], len(chosen), names[0], None)
        wide = batch_chunk(batches[b], per_gpu, chunk_ms)
        return (names, fetch_gpu_series(client, names, PEAK_METRICS, start, end, wide, None,
                                        age, scope),
                fetch_worker_activity(client, names, timeline, start - age, end, wide, age,
                                      scope))

    found: list[Peak] = []
    # the next batch is read while this one's peaks are dated: Prometheus and the collector
    # work at the same time
    for names, series, activity in prefetched(fetch, range(len(batches))):
        for name in names:
            found += gpu_peaks(name, series[name], activity[name], age, by_job=by == "job",
                               since=begin, until=until_ms, names=job_names,
                               **window_keywords(windows.get(name, default)))
    if progress:
        progress(len(chosen), len(chosen), "", None)
    return found
