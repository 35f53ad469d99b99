"""Pure time-series logic: chunk plans, edge deduplication, the as-of join of job/DAG states,
and per-GPU rows. No I/O here, so every rule is tested without a server.

Times are integer milliseconds (Prometheus' resolution): equal timestamps compare exactly,
which the joins below rely on (every series of one scrape carries the scrape's timestamp).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from itertools import pairwise
from operator import attrgetter, itemgetter
from typing import NamedTuple

from collector.columns import TOTAL_METRIC, Column

Sample = tuple[int, float]
IDLE = ("", "")
_time = itemgetter(0)


@dataclass
class Series:
    """One labelled series: samples are (milliseconds, value), oldest first."""

    labels: dict[str, str]
    samples: list[Sample] = field(default_factory=list)


# ---- chunk plans -------------------------------------------------------------------------


def plan_chunks(start: int, end: int, chunk: int) -> list[tuple[int, int]]:
    """Consecutive (lo, hi] windows covering [start, end]; the first one also includes start."""
    edges = [*range(start, end, chunk), end]
    if len(edges) == 1:
        return [(start, end)]
    return list(pairwise(edges))


def halve_range(lo: int, hi: int, smallest: int = 1000) -> tuple[tuple[int, int], ...] | None:
    """Two halves of a (lo, hi] window for a retry, or None when it is already tiny."""
    if hi - lo <= smallest:
        return None
    mid = (lo + hi) // 2
    return (lo, mid), (mid, hi)


def plan_step_chunks(start: int, end: int, step: int, max_points: int) -> list[tuple[int, int]]:
    """Grid-aligned [lo, hi] windows of at most ``max_points`` points on start + k*step.

    The windows share no grid point, so nothing is duplicated at their edges.
    """
    last = start + (end - start) // step * step
    span = (max_points - 1) * step
    chunks = []
    lo = start
    while lo <= last:
        hi = min(lo + span, last)
        chunks.append((lo, hi))
        lo = hi + step
    return chunks


def grid_halver(step: int) -> Callable[[int, int], tuple[tuple[int, int], ...] | None]:
    """Split a grid window in two windows that share no grid point."""

    def halve(lo: int, hi: int) -> tuple[tuple[int, int], ...] | None:
        points = (hi - lo) // step + 1
        if points < 2:
            return None
        mid = lo + (points // 2) * step
        return (lo, mid - step), (mid, hi)

    return halve


def clip(series: Iterable[Series], lo: int, hi: int, include_lo: bool) -> list[Series]:
    """Keep the samples in (lo, hi] ([lo, hi] with include_lo); drop series left empty.

    Range selectors are closed at both ends in Prometheus 2 and left-open in Prometheus 3,
    so a sample on a chunk edge may come back twice or once: clipping makes it once.
    Samples are in time order (as Prometheus returns them), so two bisections find the range.
    """
    out = []
    first = bisect_left if include_lo else bisect_right
    for s in series:
        kept = s.samples[first(s.samples, lo, key=_time):bisect_right(s.samples, hi, key=_time)]
        if kept:
            out.append(Series(s.labels, kept))
    return out


def merge(series: Iterable[Series]) -> list[Series]:
    """Join the pieces of each label set, oldest first, one sample per timestamp.

    A label set of one piece is taken as it is: one series of one answer is already in time
    order with one sample per timestamp.
    """
    groups: dict[tuple[tuple[str, str], ...], list[list[Sample]]] = defaultdict(list)
    for s in series:
        groups[tuple(sorted(s.labels.items()))].append(s.samples)
    merged = []
    for key, pieces in groups.items():
        if len(pieces) == 1:
            unique = pieces[0]
        else:
            samples = [sample for piece in pieces for sample in piece]
            samples.sort(key=_time)
            unique = [s for i, s in enumerate(samples) if i == 0 or s[0] != samples[i - 1][0]]
        merged.append(Series(dict(key), unique))
    return merged


def by_metric(series: Iterable[Series]) -> dict[str, list[Series]]:
    """Group series by ``__name__``."""
    groups: dict[str, list[Series]] = defaultdict(list)
    for s in series:
        groups[s.labels.get("__name__", "")].append(s)
    return groups


# ---- ids, names, workers -----------------------------------------------------------------


def id_key(value: str) -> tuple[int, int, str]:
    """Sort key that puts "2" before "10" (job, DAG and GPU ids are numbers as strings)."""
    return (0, int(value), "") if value.isdigit() else (1, 0, value)


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Name order with numbers compared as numbers: worker-2 before worker-10."""
    return tuple(id_key(part) for part in re.split(r"(\d+)", name) if part)


def format_id(value: float | None) -> str:
    """A job or DAG number from a gauge: negative (the scheduler's -1) and NaN mean idle."""
    if value is None or math.isnan(value) or value < 0:
        return ""
    return str(int(value))


@dataclass
class WorkerInfo:
    """What Prometheus knows of one worker: from dask_gpu_info and dask_job_worker_gpu_info."""

    name: str
    addresses: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    gpus: list[tuple[str, str]] = field(default_factory=list)


def worker_inventory(gpu_info: Iterable[Mapping[str, str]],
                     scheduler_info: Iterable[Mapping[str, str]]) -> list[WorkerInfo]:
    """Workers that have GPU series, in name order, with every address/host/GPU they had.

    A restarted worker may come back with another address or on another host: all are kept.
    """
    workers: dict[str, WorkerInfo] = {}

    def add(values: list, value: object) -> None:
        if value and value not in values:
            values.append(value)

    for labels in gpu_info:
        info = workers.setdefault(labels.get("worker", ""), WorkerInfo(labels.get("worker", "")))
        add(info.hosts, labels.get("hostname", ""))
        add(info.gpus, (labels.get("gpu", ""), labels.get("uuid", "")))
    for labels in scheduler_info:
        if labels.get("worker") in workers:
            add(workers[labels["worker"]].addresses, labels.get("address", ""))
    for info in workers.values():
        info.gpus.sort(key=lambda g: (id_key(g[0]), g[1]))
    return sorted(workers.values(), key=lambda w: natural_key(w.name))


def select_workers(workers: list[WorkerInfo], patterns: Sequence[str] | None) -> list[WorkerInfo]:
    """The workers named by ``patterns`` (exact names or shell globs such as ``gpu-*``).

    Raises LookupError naming a pattern that matches no worker.
    """
    if not patterns:
        return workers
    chosen = {w.name for p in patterns for w in workers if fnmatchcase(w.name, p)}
    missing = [p for p in patterns if not any(fnmatchcase(w.name, p) for w in workers)]
    if missing:
        raise LookupError(missing[0])
    return [w for w in workers if w.name in chosen]


# ---- as-of join of job/DAG states ----------------------------------------------------------


@dataclass(frozen=True)
class Timeline:
    """(job, dag) states at scrape times, for as-of lookups; ("", "") is idle."""

    times: list[int]
    states: list[tuple[str, str]]

    def at(self, t: int, max_age: int) -> tuple[str, str]:
        """The state of the last scrape at or before ``t`` (never a later one).

        Idle when there is none, or when it is older than ``max_age``: the scheduler was not
        scraped then, and an old state must not be carried across the gap.
        """
        i = bisect_right(self.times, t) - 1
        if i < 0 or t - self.times[i] > max_age:
            return IDLE
        return self.states[i]


def cluster_timeline(job: Iterable[Series], dag: Iterable[Series]) -> Timeline:
    """The cluster-wide job/DAG (dask_job_current_job/_dag) at each scheduler scrape."""

    def values(series: Iterable[Series]) -> dict[int, float]:
        return {t: v for s in series for t, v in s.samples}

    jobs, dags = values(job), values(dag)
    times = sorted(jobs.keys() | dags.keys())
    return Timeline(times, [(format_id(jobs.get(t)), format_id(dags.get(t))) for t in times])


def worker_timeline(scrapes: Sequence[int], tasks: Iterable[Series]) -> Timeline:
    """What one worker ran at each scheduler scrape, from its dask_job_worker_tasks series.

    The series exists only while the worker has tasks of that DAG, so a scrape without it is
    idle. When the worker runs several DAGs at once the oldest one (lowest job id, then dag id)
    is taken: a deterministic choice that follows the scheduler's own "oldest unfinished DAG".
    """
    active: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for s in tasks:
        dag = (s.labels.get("job_id", ""), s.labels.get("dag_id", ""))
        for t, v in s.samples:
            if v > 0:
                active[t].append(dag)
    times = sorted(set(scrapes) | active.keys())
    states = [min(active[t], key=lambda d: (id_key(d[0]), id_key(d[1])), default=IDLE)
              for t in times]
    return Timeline(times, states)


# ---- per-GPU rows --------------------------------------------------------------------------


class GpuRow(NamedTuple):
    """One sample time of one GPU, with the job/DAG states and one value per column.

    A NamedTuple: several times cheaper to make than a frozen dataclass, and as immutable."""

    time: int
    gpu: str
    uuid: str
    job: str
    dag: str
    worker_job: str
    worker_dag: str
    values: tuple[float | None, ...]


GpuKey = tuple[str, str]


def gpu_samples(series_by_metric: Mapping[str, Iterable[Series]]
                ) -> dict[GpuKey, dict[str, dict[int, float]]]:
    """{(gpu, uuid): {metric: {time: value}}}; a restarted worker's series join again here."""
    gpus: dict[GpuKey, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for metric, series in series_by_metric.items():
        for s in series:
            key = (s.labels.get("gpu", ""), s.labels.get("uuid", ""))
            values = gpus[key][metric]
            if not values:  # the usual case: one series (merged: one sample per time)
                values.update(s.samples)
            else:
                for t, v in s.samples:
                    values.setdefault(t, v)
    return gpus


def gpu_order(key: GpuKey) -> tuple:
    return id_key(key[0]), key[1]


def gpu_rows(series_by_metric: Mapping[str, Iterable[Series]], columns: Sequence[Column],
             cluster: Timeline, worker: Timeline, max_age: int) -> list[GpuRow]:
    """Rows at every time one of the columns' series has a sample; nothing is interpolated.

    A column whose series has no sample at that time stays empty (None): gaps stay gaps.
    ``mem-util`` divides by the total of the same scrape.
    """
    rows = []
    states: dict[int, tuple[str, str, str, str]] = {}  # the GPUs of a worker share scrapes
    gpus = gpu_samples(series_by_metric)
    for gpu, uuid in sorted(gpus, key=gpu_order):
        metrics = gpus[gpu, uuid]
        sources = [metrics.get(c.metric, {}) for c in columns]
        totals = metrics.get(TOTAL_METRIC, {})
        times = sorted(set().union(*sources)) if sources else []
        cols = []  # column by column: Column.value only where it changes the raw value
        for c, src in zip(columns, sources, strict=True):
            raw = list(map(src.get, times))
            if c.per_total:
                cols.append(list(map(c.value, raw, map(totals.get, times))))
            elif c.scale == 1:
                cols.append(raw)
            else:
                cols.append(list(map(c.value, raw, [None] * len(raw))))
        for t, values in zip(times, zip(*cols, strict=True), strict=True):
            state = states.get(t)
            if state is None:
                state = states[t] = (*cluster.at(t, max_age), *worker.at(t, max_age))
            rows.append(GpuRow(t, gpu, uuid, *state, values))
    rows.sort(key=attrgetter("time"))  # stable: at equal times the GPUs stay in GPU order
    return rows
