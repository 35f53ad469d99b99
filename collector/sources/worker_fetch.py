"""One worker's part of an export, read from Prometheus: its GPUs' series, what it ran when,
its resources and the prefixes it executed, in as few queries as the data needs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from dask_metrics.collector.model.columns import Column, source_metrics, worker_metrics
from dask_metrics.collector.model.series import (
    Samples,
    Series,
    Timeline,
    WorkerInfo,
    by_metric,
    clip,
)
from dask_metrics.collector.model.tables import WorkerTable, joined_by_metric
from dask_metrics.collector.model.timeline import RAN_METRICS, ran_timeline, within
from dask_metrics.collector.query.pieces import Piece
from dask_metrics.collector.query.presence import lookahead
from dask_metrics.collector.query.scope import ATTRIBUTION_METRICS, Scope
from dask_metrics.collector.sources.worker_series import fetch_gpu_series, fetch_worker_series
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.work.background import Background
from dask_metrics.contract import WORKER_PREFIX_TASKS


class VisitPart(NamedTuple):
    """The part of the range a visit's call holds: the whole range (``first`` and ``last``),
    or one of the pieces a long range is read in, in order. ``moments``: [a, b) (ms), the
    range's moments the piece holds (its series reach further: the first piece's from the
    read start, each to a peak window past b); ``ran``: what the worker ran from ``margin``
    (and max_age) before a to ``margin`` after b, for what is dated around the piece's edges
    (None for the whole range: the activity's)."""

    moments: tuple[int, int]
    first: bool = True
    last: bool = True
    margin: int | None = None
    ran: Timeline | None = None


Visit = Callable[[WorkerInfo, Mapping[str, list[Series]], Timeline, WorkerTable, VisitPart],
                 None]
"""Called with each worker's fetched series, activity and table as it is written, a piece at
a time: what the session report computes from the very data of the export."""


class WorkerData(NamedTuple):
    """What one worker's part of an export reads from Prometheus."""

    gpu: dict[str, list[Series]]  # the columns' series (raw, or on the --step grid)
    ran: Timeline  # what it ran when (model.timeline)
    resources: dict[str, Samples]  # the worker columns' series
    prefixes: list[Series]  # dask_job_worker_prefix_tasks
    attribution: dict[str, list[Series]]  # raw busy, energy and memory used, and the
    # samples just outside the range (at most ``age`` before and after)
    around: dict[str, list[Series]] | None = None  # raw, over ``fetch_workers``' ``around``


def fetch_workers(client: PrometheusClient, workers: Sequence[str], columns: Sequence[Column],
                  timeline: Timeline, lo: int, hi: int, chunk: int, step: int | None,
                  age: int, scope: Scope, executed: Collection[str], extra: Sequence[str] = (),
                  around: tuple[int, int] | None = None, until: int | None = None
                  ) -> dict[str, WorkerData]:
    """The series of a batch of workers (``worker_batches``): their GPUs' columns and their
    scheduler series (tasks, the worker columns', prefix tasks), one query each for the
    whole batch; a batch of one asks exactly what a single worker needs.

    ``executed``: the workers the scheduler saw executing tasks in the range
    (``executing_workers``); only theirs are the prefix tasks and gpu_by_prefix's raw
    counters read (with the samples just outside the range), the counters not among the
    columns' in a third query sent at the same time as the columns' (in a thread: the
    server answers both at once), raw also with ``step``. A worker without them adds
    nothing to gpu_by_prefix.csv, and data from an older scheduler preload costs no more
    series. ``extra``: more series of the workers, raw, fetched with the columns' (without
    ``step``). ``around``: a window (ms) over which the columns' and ``extra``'s raw series
    are wanted too (WorkerData.around), without ``step``.

    Without ``step`` the columns' series are read once over the widest window asked (the
    range, the samples just outside it, ``around``) and cut into each: a few minutes more
    samples, where a query per window was two or three more queries per batch.

    ``until``: where the workers' DAG spans are cut (``hi`` by default: a DAG running then
    holds its worker up to there); a piece of a longer range (pieces.Piece) reads them, and
    the prefixes executing, past its end up to ``until``, where the whole range's are known
    for the intervals across its end."""
    ran = [w for w in workers if w in executed]
    metrics = source_metrics(columns) + [m for m in extra if step is None]
    apart_metrics = [m for m in ATTRIBUTION_METRICS if m not in metrics or step] if ran else []
    reused = [m for m in ATTRIBUTION_METRICS if m not in apart_metrics] if ran else []
    after = lookahead(hi, age)

    def raw(names: Sequence[str], a: int, b: int) -> dict[str, dict[str, list[Series]]]:
        return fetch_gpu_series(client, ran, names, a, b, chunk, None, age, scope)

    apart = Background(lambda names: raw(names, lo - age, after),
                       apart_metrics) if apart_metrics else None
    seen: dict[str, dict[str, list[Series]]] = {}
    if step is None:
        first, last = (lo - age, after) if reused else (lo, hi)
        if around is not None:
            first, last = min(first, around[0]), max(last, around[1])
        wide = fetch_gpu_series(client, workers, metrics, first, last, chunk, None, age, scope)
        gpu = {w: _cut(found, lo, hi) for w, found in wide.items()}
        # the samples just outside [lo, hi]: the intervals that straddle the range's edges
        counters = {w: {m: wide[w][m] for m in reused if m in wide[w]} for w in ran}
        head = {w: _cut(found, lo - age, lo - 1) for w, found in counters.items()}
        tail = {w: _cut(found, hi + 1, after) for w, found in counters.items()} \
            if after > hi else {}
        if around is not None:
            seen = {w: _cut(found, *around) for w, found in wide.items()}
    else:
        gpu = fetch_gpu_series(client, workers, metrics, lo, hi, chunk, step, age, scope)
        head = raw(reused, lo - age, lo - 1) if reused else {}
        tail = raw(reused, hi + 1, after) if reused and after > hi else {}
    found_apart = apart.result() if apart is not None else {}
    resources = worker_metrics(columns)
    sched = {w: [*resources, *RAN_METRICS, *([WORKER_PREFIX_TASKS.name] if w in executed else [])]
             for w in workers}
    asked = sorted({m for names in sched.values() for m in names})
    end = hi if until is None else max(hi, until)
    found = fetch_worker_series(client, workers, asked, lo - age, lookahead(end, age), chunk,
                                scope)
    out = {}
    for w in workers:
        by = by_metric(s for s in found[w] if s.labels.get("__name__") in sched[w])
        mine = within(by, lo - age, hi)
        attribution = {m: found_apart.get(w, {}).get(m, []) if m in apart_metrics
                       else [*head.get(w, {}).get(m, []), *gpu[w].get(m, []),
                             *tail.get(w, {}).get(m, [])]
                       for m in ATTRIBUTION_METRICS} if w in executed else {}
        out[w] = WorkerData(gpu[w], ran_timeline(mine, timeline.times, end, age),
                            joined_by_metric({m: mine[m] for m in resources if m in mine}),
                            clip(by.get(WORKER_PREFIX_TASKS.name, []), lo - age, end, True),
                            attribution, seen.get(w))
    return out


def _cut(found: Mapping[str, list[Series]], lo: int, hi: int) -> dict[str, list[Series]]:
    """The samples in [lo, hi] of each metric's series, as a query of that window returns
    them: a series without one there, and a metric without such a series, left out."""
    return {m: kept for m, series in found.items() if (kept := clip(series, lo, hi, True))}


def fetch_piece(client: PrometheusClient, workers: Sequence[str], columns: Sequence[Column],
                timeline: Timeline, piece: Piece, chunk: int, step: int | None, age: int,
                scope: Scope, executed: Collection[str], extra: Sequence[str] = (),
                around: tuple[int, int] | None = None
                ) -> tuple[Timeline, dict[str, WorkerData]]:
    """``fetch_workers`` of one piece of a range (pieces.pieces), with the part of the
    cluster's ``timeline`` it reads (its joins, the workers' timelines and scrape lookups
    are then those of an export of that piece alone)."""
    known = timeline.between(piece.lo - age, lookahead(piece.until, age))
    return known, fetch_workers(client, workers, columns, known, piece.lo, piece.hi, chunk,
                                step, age, scope, executed, extra, around, piece.until)
