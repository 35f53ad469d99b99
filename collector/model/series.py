"""Pure time-series logic: chunk plans, edge deduplication, the as-of join of job/DAG states,
and per-GPU tables. No I/O here, so every rule is tested without a server.

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
from itertools import pairwise, repeat

from dask_metrics.collector.model.lifetimes import qualify
from dask_metrics.contract import SCHEDULER_START, SIMULATED

NOTHING_RAN = ("", "")  # the (job, dag) state of a worker or cluster that ran no DAG
Samples = tuple[list[int], list[float]]
"""(times, values) of one series, or of several joined."""


@dataclass
class Series:
    """One labelled series, column-wise: ``times`` (milliseconds, oldest first) and the
    ``values`` sampled then. Two lists rather than a (time, value) pair per sample: an export
    handles millions of samples, and whole columns are joined and formatted at C speed."""

    labels: dict[str, str]
    times: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


# ---- chunk plans -------------------------------------------------------------------------


CHUNK_SLACK = 4
"""A last window no longer than 1/CHUNK_SLACK of a chunk rides with the one before: the
minutes read around a range (max_age before and after it) cost no query of their own."""


def plan_chunks(start: int, end: int, chunk: int) -> list[tuple[int, int]]:
    """Consecutive (lo, hi] windows covering [start, end]; the first one also includes start."""
    edges = [*range(start, end, chunk), end]
    if len(edges) == 1:
        return [(start, end)]
    if len(edges) > 2 and (end - edges[-2]) * CHUNK_SLACK <= chunk:
        del edges[-2]
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
        i, j = first(s.times, lo), bisect_right(s.times, hi)
        if i < j:
            out.append(Series(s.labels, s.times[i:j], s.values[i:j]))
    return out


def merge(series: Iterable[Series], replica_labels: Sequence[str] = ()) -> list[Series]:
    """Join the pieces of each label set, oldest first, one sample per timestamp (the first
    piece's where pieces overlap).

    Pieces in time order that do not overlap (clipped chunks, the usual case) are simply
    concatenated; a label set of one piece is taken as it is: one series of one answer is
    already in time order with one sample per timestamp.

    ``replica_labels`` (Prometheus HA pairs, federation) are not part of a series' identity:
    series that differ only by them are one series, deduplicated by ``dedup_replicas``.
    """
    drop = frozenset(replica_labels)
    groups: dict[tuple[tuple[str, str], ...], dict[tuple[str, ...], list[Series]]] = (
        defaultdict(lambda: defaultdict(list)))
    for s in series:
        labels = s.labels
        if drop and not drop.isdisjoint(labels):
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in drop))
            groups[key][tuple(labels.get(k, "") for k in replica_labels)].append(s)
        else:
            groups[tuple(sorted(labels.items()))][()].append(s)
    merged = []
    for key, replicas in groups.items():
        if len(replicas) == 1:
            times, values = join(next(iter(replicas.values())))
        else:
            times, values = dedup_replicas([join(replicas[r]) for r in sorted(replicas)])
        merged.append(Series(dict(key), times, values))
    return merged


def dedup_replicas(replicas: Sequence[Samples]) -> Samples:
    """One series from the copies that HA replicas scraped of it, in replica-label order.

    The first replica is taken whole; another one's sample is added only where no sample
    kept so far lies within half the first replica's usual (median) scrape interval: it fills
    the first one's gaps (a replica down or restarting) without doubling the samples of two
    scrapers a fraction of an interval apart. Where replicas disagree at the same time, the
    first replica's value is kept (the same replica for every series, so that a row's
    columns come from one scraper).
    """
    times, values = replicas[0]
    steps = sorted(b - a for a, b in pairwise(times))
    tolerance = steps[len(steps) // 2] // 2 if steps else 0
    kept = dict(zip(times, values, strict=True))
    for other_times, other_values in replicas[1:]:
        order = sorted(kept)
        for t, v in zip(other_times, other_values, strict=True):
            i = bisect_left(order, t - tolerance)
            if i < len(order) and order[i] <= t + tolerance:
                continue
            kept[t] = v
    ordered = sorted(kept)
    return ordered, list(map(kept.__getitem__, ordered))


def join(pieces: Iterable[Series]) -> Samples:
    """(times, values) of several series in time order; at a time that more than one has,
    the first one's sample wins. Pieces that follow one another, or touch at one sample (a
    query's chunks, a range and the samples fetched just before and after it, a restarted
    worker's series), are laid end to end without a merge."""
    pieces = [p for p in pieces if p.times]
    if len(pieces) == 1:
        return pieces[0].times, pieces[0].values
    ordered = sorted(range(len(pieces)), key=lambda i: (pieces[i].times[0], pieces[i].times[-1]))
    if all(pieces[a].times[-1] <= pieces[b].times[0] for a, b in pairwise(ordered)):
        times: list[int] = []
        values: list[float] = []
        owner = -1  # the piece whose sample is last so far
        for i in ordered:
            ts, vs = pieces[i].times, pieces[i].values
            start = 0
            if times and ts[0] == times[-1]:  # touching: the first piece given wins
                if i < owner:
                    values[-1], owner = vs[0], i
                start = 1
            if start < len(ts):
                times.extend(ts[start:])
                values.extend(vs[start:])
                owner = i
        return times, values
    unique: dict[int, float] = {}
    for p in pieces:
        for t, v in zip(p.times, p.values, strict=True):
            unique.setdefault(t, v)
    times = sorted(unique)
    return times, list(map(unique.__getitem__, times))


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
    simulated: bool = False  # a GPU of it carried simulated="true": synthetic numbers
    # dask_gpu_info's labels of each (gpu, uuid): model, capacity, driver for the report
    gpu_labels: dict[tuple[str, str], dict[str, str]] = field(
        default_factory=dict, compare=False, repr=False)


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
        gpu = (labels.get("gpu", ""), labels.get("uuid", ""))
        add(info.gpus, gpu)
        info.gpu_labels.setdefault(gpu, dict(labels))
        info.simulated = info.simulated or labels.get(SIMULATED) == "true"
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
    """(job, dag) states at scrape times, for as-of lookups; ("", "") is idle.

    ``exact``: the times are where the state changed (the scheduler's own times, see
    model.timeline), not scrapes that sampled it: a state holds from its time on, so an
    interval between two GPU samples can be split at the times inside it."""

    times: list[int]
    states: list[tuple[str, str]]
    exact: bool = False
    # the last ``positions`` answer, [times asked, max_age, answer]: a worker's GPUs mostly
    # share their sample times, and timelines of the same times (by job, by DAG) share it
    memo: list = field(default_factory=list, compare=False, repr=False)

    def between(self, lo: int, hi: int) -> Timeline:
        """The points in [lo, hi]: what an export of a part of the range reads."""
        i, j = bisect_left(self.times, lo), bisect_right(self.times, hi)
        return Timeline(self.times[i:j], self.states[i:j], self.exact)

    def at(self, t: int, max_age: int) -> tuple[str, str]:
        """The state of the last scrape at or before ``t`` (never a later one).

        Idle when there is none, or when it is older than ``max_age``: the scheduler was not
        scraped then, and an old state must not be carried across the gap.
        """
        return self.at_each([t], max_age)[0]

    def at_each(self, times: Sequence[int], max_age: int) -> list[tuple[str, str]]:
        """``at`` for every one of ``times``: one lookup per GPU sample time of an export,
        made without a Python call each."""
        return list(map([NOTHING_RAN, *self.states].__getitem__,
                        self.positions(times, max_age)))

    def positions(self, times: Sequence[int], max_age: int) -> list[int]:
        """1 + the position in ``self.times`` of the last one at or before each of ``times``
        and at most ``max_age`` older, else 0."""
        memo = self.memo
        if memo and memo[1] == max_age and memo[0] == times:
            return memo[2]
        scrapes = self.times
        found = [i if i and t - scrapes[i - 1] <= max_age else 0
                 for t, i in zip(times, map(bisect_right, repeat(scrapes), times), strict=True)]
        memo[:] = [list(times), max_age, found]
        return found


def cluster_timeline(job: Iterable[Series], dag: Iterable[Series]) -> Timeline:
    """The cluster-wide job/DAG (dask_job_current_job/_dag) at each scheduler scrape."""

    def values(series: Iterable[Series]) -> dict[int, tuple[float, str]]:
        return {t: (v, s.labels.get(SCHEDULER_START, "")) for s in series
                for t, v in zip(s.times, s.values, strict=True)}

    def ident(found: tuple[float, str] | None) -> str:
        return "" if found is None else format_id(found[0])

    jobs, dags = values(job), values(dag)
    times = sorted(jobs.keys() | dags.keys())
    return Timeline(times, [(qualify(ident(jobs.get(t)), jobs.get(t, (0, ""))[1]),
                             ident(dags.get(t))) for t in times])
