"""``peaks``: the peak GPU memory of each worker's GPUs, when it happened and during which
job/DAG, from ``dask_gpu_memory_peak_bytes`` raw samples.

That gauge is the maximum of every internal exporter sample over its trailing peak window,
so a spike between two scrapes still counts, and ``dask_gpu_memory_peak_timestamp_seconds``
dates it (``timing``): a spike before ``since`` is left out, one just before ``until`` is
counted (from the first scrape after ``until``, which is why the range is fetched a window
further), and each spike is credited to what ran when it happened (``fold``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.model.series import Series, Timeline
from dask_metrics.collector.model.timespec import to_ms
from dask_metrics.collector.peaks.fold import PeakFold
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.peaks.samples import (
    DEFAULT_PEAK_WINDOW,
    PEAK_METRICS,
    tail_of,
    window_keywords,
)
from dask_metrics.collector.query.batches import (
    batch_chunk,
    range_batches,
    samples_per_gpu,
    worker_batches,
)
from dask_metrics.collector.query.pieces import pieces
from dask_metrics.collector.query.presence import lookahead
from dask_metrics.collector.query.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE, check_range
from dask_metrics.collector.sources.cluster import fetch_jobs
from dask_metrics.collector.sources.discovery import Progress
from dask_metrics.collector.sources.plan import Choice, ReadPlan, read_plan
from dask_metrics.collector.sources.worker_series import (
    fetch_gpu_series,
    fetch_worker_activity,
    peak_windows,
)
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.work.background import gc_paused, prefetched
from dask_metrics.contract import REPLICA_LABELS

BY = ("gpu", "job")


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
    choice = Choice(workers, cluster, tuple(replica_labels), any_cluster)
    windows = peak_windows(client, begin, until_ms, choice.named())
    default = (to_ms(peak_window), 0)
    tail = tail_of(windows, default[0])
    # the data a peak window past the end, and what its edges reach: a session shorter
    # than a scrape has its first samples in the tail
    plan = read_plan(client, since, until, choice, max_age=max_age, chunk=chunk, tail=tail,
                     margin=max(age, tail))
    # the range's jobs (plan.lo, plan.hi: the GPUs' data, whose dated peaks reach before it)
    job_names = JobNames.from_rows(fetch_jobs(client, begin, until_ms, chunk_ms, age,
                                              plan.scope))
    reads = _Reads(client, plan, age, chunk_ms, tail, progress)
    last = len(reads.parts) - 1
    found: list[Peak] = []
    folds: dict[str, PeakFold] = {}
    # the next batch (or chunk) is read while this one's peaks are dated: Prometheus and
    # the collector work at the same time
    for (_, k), (names, series, activity) in zip(reads.steps, prefetched(reads.fetch,
                                                                          reads.steps),
                                                 strict=True):
        for name in names:
            fold = folds.setdefault(name, PeakFold(
                name, [by == "job"], age, since=begin, until=until_ms, names=job_names,
                **window_keywords(windows.get(name, default))))
            fold.add(series[name], [activity[name]], *reads.parts[k],
                     margin=None if reads.whole else reads.margin, final=k == last)
            if k == last:
                found += folds.pop(name).result()[0]
    if progress:
        progress(len(plan.workers), len(plan.workers), "", None)
    return found


class _Reads:
    """What ``peaks`` reads: batches of workers by pieces of the range, a piece as many
    chunks long as one worker's answer holds (the fewer pieces, the less read twice around
    their edges), a batch's piece in memory whatever the range; a range of one piece is
    read whole, in as few queries as its answers allow."""

    def __init__(self, client: PrometheusClient, plan: ReadPlan, age: int, chunk: int,
                 tail: int, progress: Progress | None) -> None:
        self.client, self.plan, self.age, self.chunk = client, plan, age, chunk
        self.tail, self.progress = tail, progress
        self.per_gpu = samples_per_gpu(client, plan.lo, plan.hi, chunk, len(PEAK_METRICS),
                                       None, plan.scope)
        widest = max(plan.workers, key=lambda w: len(w.gpus), default=None)
        self.length = batch_chunk([widest], self.per_gpu, chunk) if widest else chunk
        self.parts = _parts(plan.start, plan.end, plan.lo, plan.hi, max(self.length, tail))
        self.whole = len(self.parts) == 1
        self.batches = (range_batches(plan.workers, self.per_gpu, plan.lo, plan.hi, chunk)
                        if self.whole else
                        worker_batches(plan.workers, self.per_gpu * self.length / chunk))
        self.firsts = list(accumulate([0, *map(len, self.batches)]))
        self.steps = [(b, k) for b in range(len(self.batches)) for k in range(len(self.parts))]
        self.margin = 2 * tail  # what ran around a piece: the spans its windows' stamps lie in

    def fetch(self, at: tuple[int, int]) -> tuple[list[str], dict[str, dict[str, list[Series]]],
                                                   dict[str, Timeline]]:
        """The names, GPU series and activity of batch b's workers in piece k (``at``)."""
        (b, k), plan, client, age = at, self.plan, self.client, self.age
        names = [w.name for w in self.batches[b]]
        if self.progress:
            self.progress(self.firsts[b] + len(names) * k / len(self.parts),
                          len(plan.workers), names[0], None)
        if self.whole:
            wide = batch_chunk(self.batches[b], self.per_gpu, self.chunk)
            return (names, fetch_gpu_series(client, names, PEAK_METRICS, plan.lo, plan.hi,
                                            wide, None, age, plan.scope),
                    fetch_worker_activity(client, names, plan.timeline, plan.lo - age,
                                          plan.hi, wide, age, plan.scope))
        a, z = self.parts[k]
        ran = (a - self.margin - age, z + self.margin)
        known = plan.timeline.between(ran[0], lookahead(ran[1], age))
        return (names, fetch_gpu_series(client, names, PEAK_METRICS, plan.lo if k == 0 else a,
                                        min(plan.hi, z + self.tail), self.length, None, age,
                                        plan.scope),
                fetch_worker_activity(client, names, known, *ran, self.length, age,
                                      plan.scope))


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
