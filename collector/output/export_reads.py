"""An export's reads: each batch of workers a piece of the range at a time, with what a
visit (the session report) needs around the range, which no file holds.

A long range is read, joined and written a chunk at a time (``pieces``), so that memory
holds one batch's chunk whatever the range; a visit folds its workers a piece at a time
too, pieces as long as one worker's answer holds (the fewer, the less read twice around
their edges) and at least its tail; the seed layout's rows have a slot for every GPU the
worker had in the range, so a batch's whole range is held then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

from dask_metrics.collector.model.columns import Column, source_metrics
from dask_metrics.collector.model.series import Series, Timeline, WorkerInfo
from dask_metrics.collector.model.timespec import to_ms
from dask_metrics.collector.peaks.fold import LATER
from dask_metrics.collector.query.batches import (
    batch_chunk,
    range_batches,
    samples_per_gpu,
    worker_batches,
)
from dask_metrics.collector.query.pieces import Piece, pieces
from dask_metrics.collector.query.presence import lookahead
from dask_metrics.collector.sources.cluster import executing_workers
from dask_metrics.collector.sources.discovery import Progress
from dask_metrics.collector.sources.plan import ReadPlan
from dask_metrics.collector.sources.worker_fetch import Visit, VisitPart, WorkerData, fetch_piece
from dask_metrics.collector.sources.worker_series import fetch_gpu_series, fetch_worker_activity
from dask_metrics.collector.store.client import PrometheusClient


@dataclass(frozen=True)
class Visiting:
    """A caller that sees each worker's data as the export reads it (the session report).

    ``expect`` sees every worker ``visit`` will see, before the first; ``metrics``: series
    whose raw samples it sees too (no column); ``tail``/``head``: seconds of the GPU series
    past the end (never past now: the first scrape after it dates a peak just before it)
    and before the start (the scrape interval across it); ``worker_files`` False writes no
    per-worker file (export.json then lists none).
    """

    visit: Visit
    expect: Callable[[Sequence[WorkerInfo]], None] | None = None
    metrics: Sequence[str] = ()
    tail: float = 0.0
    head: float = 0.0
    worker_files: bool = True


Found = tuple[Timeline, list[tuple[WorkerData, dict[str, list[Series]], VisitPart]]]


class ExportReads:
    """The steps (batch, piece) of an export and the read of each: a callable for
    ``prefetched``, so that the next step is read while this one is written."""

    def __init__(self, client: PrometheusClient, plan: ReadPlan, columns: Sequence[Column],
                 seed: bool, visiting: Visiting | None, progress: Progress | None) -> None:
        self.client, self.plan, self.columns, self.progress = client, plan, columns, progress
        self.visiting = visiting
        self.visit = visiting is not None
        self.extra = tuple(visiting.metrics) if visiting else ()
        self.tail = to_ms(visiting.tail) if visiting else 0
        self.head = to_ms(visiting.head) if visiting else 0
        self.rows = 0  # rows written so far, for ``progress``
        p, chosen = plan, plan.workers
        self.executed = executing_workers(client, p.lo, p.hi, p.chunk, p.age, plan.names,
                                          p.scope)
        # past the data's end, never further than the tail asked for beyond it: a range
        # whose data ended long before its end costs no chunks of nothing
        self.tail_end = max(p.hi, min(p.end + self.tail, p.hi + self.tail,
                                      to_ms(time.time()))) if self.visit else p.hi
        self.outside = [*source_metrics(columns), *self.extra]
        self.per_gpu = samples_per_gpu(client, p.lo, p.hi, p.chunk, len(self.outside),
                                       p.step, p.scope)
        self.length = p.chunk
        if self.visit and not p.step and chosen:
            widest = max(chosen, key=lambda w: len(w.gpus))
            self.length = max(batch_chunk([widest], self.per_gpu, p.chunk), self.tail)
        self.parts = ([Piece(p.lo, p.hi, p.hi, (p.start, p.end))]
                      if seed or (self.visit and p.step)
                      else pieces(p.lo, p.hi, p.start, p.end, self.length, p.age, p.step))
        self.whole = len(self.parts) == 1 and (self.visit or seed)
        self.batches = (range_batches(chosen, self.per_gpu, p.lo, p.hi, p.chunk) if self.whole
                        else worker_batches(chosen, self.per_gpu * self.length / p.chunk))
        self.firsts = list(accumulate([0, *map(len, self.batches)]))
        self.steps = [(b, k) for b in range(len(self.batches)) for k in range(len(self.parts))]
        self.last = len(self.parts) - 1
        self.margin = 2 * self.tail  # what ran around a visited piece: its stamps' spans

    def __call__(self, at: tuple[int, int]) -> Found:
        b, k = at
        p, batch, part = self.plan, [w.name for w in self.batches[b]], self.parts[k]
        if self.progress:  # a batch's chunks done count as fractions of it: a pace for a day
            self.progress(self.firsts[b] + len(batch) * k / len(self.parts), len(p.workers),
                          batch[0], self.rows)
        around = (p.lo - self.head if k == 0 else part.lo,
                  self.tail_end if k == self.last else min(self.tail_end, part.hi + self.tail)
                  ) if self.visit and p.step is None else None
        # a batch's range held whole is read in as few queries as its answers allow
        wide = batch_chunk(self.batches[b], self.per_gpu, p.chunk) \
            if self.whole and not p.step else self.length
        known, found = fetch_piece(self.client, batch, self.columns, p.timeline, part, wide,
                                   p.step, p.age, p.scope, self.executed, self.extra, around)
        if around is not None:  # the raw columns' read once over the visit's window too
            return known, self._visited(batch, found, part, k, wide)
        return known, self._edges(batch, found, wide)

    def _visited(self, batch: list[str], found: Mapping[str, WorkerData], part: Piece,
                 k: int, wide: int) -> list[tuple[WorkerData, dict[str, list[Series]],
                                                  VisitPart]]:
        p = self.plan
        visited = visit_part(part, k == 0, k == self.last, p.end, self.margin)
        if visited.margin is None:
            return [(found[w], found[w].around or {}, visited) for w in batch]
        ran = (visited.moments[0] - self.margin - p.age, visited.moments[1] + self.margin)
        runs = fetch_worker_activity(self.client, batch, p.timeline.between(
            ran[0], lookahead(ran[1], p.age)), *ran, wide, p.age, p.scope)
        return [(found[w], found[w].around or {}, visited._replace(ran=runs[w]))
                for w in batch]

    def _edges(self, batch: list[str], found: Mapping[str, WorkerData], wide: int
               ) -> list[tuple[WorkerData, dict[str, list[Series]], VisitPart]]:
        """Each worker's columns, with the tail and head a visit asked for past the read."""
        p = self.plan
        whole_part = VisitPart((p.start, p.end + 1))
        if self.tail_end <= p.hi and not self.head:
            return [(found[w], found[w].gpu, whole_part) for w in batch]
        more = fetch_gpu_series(self.client, batch, self.outside, p.hi, self.tail_end, wide,
                                None, p.age, p.scope) if self.tail_end > p.hi else {}
        head = fetch_gpu_series(self.client, batch, self.outside, p.lo - self.head, p.lo,
                                wide, None, p.age, p.scope) if self.head else {}
        out = []
        for w in batch:
            gpu, after, before = found[w].gpu, more.get(w, {}), head.get(w, {})
            out.append((found[w], {m: [*before.get(m, []), *gpu.get(m, []), *after.get(m, [])]
                                   for m in gpu.keys() | after.keys() | before.keys()},
                        whole_part))
        return out


def visit_part(piece: Piece, first: bool, last: bool, end: int, margin: int) -> VisitPart:
    """A visit's part of the range: the whole of it, or a piece's moments, from its window's
    start to the next one's (the last: to the range's end), its activity to be read
    ``margin`` around them."""
    if first and last:
        return VisitPart((piece.window[0], end + 1))
    return VisitPart((piece.window[0], end + 1 if last else piece.window[1]), first, last,
                     margin)


def own_times(visited: Mapping[str, list[Series]], piece: Piece, first: bool, last: bool
              ) -> list[int]:
    """The sample times of a visited piece that are its own: inside it, with the samples
    before the range in the first piece and past it in the last (a piece's series reach into
    the next one's)."""
    lo = -LATER if first else piece.lo
    hi = LATER if last else piece.hi
    return sorted({t for got in visited.values() for one in got for t in one.times
                   if lo <= t <= hi})
