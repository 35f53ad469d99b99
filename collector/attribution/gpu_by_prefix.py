"""gpu_by_prefix.csv: GPU busy time, peak memory and energy per job, DAG and task prefix,
attributed from each GPU sample to the prefixes executing on its worker then. Pure.

Rules, where the scheduler preload exports when each worker ran each DAG (its own times,
see ``model.timeline``):

- which DAG: an interval between two GPU samples belongs to the DAG that held the worker
  then; one in which that changed is cut at the change, each piece taking its share of the
  counters' increase in proportion to time (the report's rule: the same DAG totals);
- which prefixes of it: the DAG's share is split among its tasks executing on the worker at
  the scheduler's last scrape at or before the piece's end that showed some (else the first
  one after), each task an equal share; a DAG that no scrape saw executing there (it ran
  between two) gets one row with an empty prefix: its GPU time is known, its functions not;
- peak memory: the largest ``dask_gpu_memory_used_bytes`` of any one GPU of the worker at a
  sample where the prefix executed by those rules; not split;
- a GPU that several workers see: one device, its intervals cut wherever any of them changed
  DAG and each piece split equally among those holding a DAG then (prefix_exact).

With an older preload (no such times; on a shared GPU, any of its workers'):

- what ran: ``dask_job_worker_prefix_tasks`` at the scheduler's last scrape at or before the
  GPU sample, at most ``max_age`` old (the as-of join of job and DAG); a scheduler scrape
  without a series of this worker means nothing executed on it;
- busy seconds and energy: the increase from a GPU's previous sample to this one, split
  among the tasks executing at this sample, each task an equal share: a prefix with k of
  the n tasks gets k/n. With no task executing, nobody gets it (idle time);
- peak memory: as above, at the samples where the prefix executed.

Always: increases of ``dask_gpu_busy_seconds_total`` and ``dask_gpu_energy_joules_total``
are reset-safe (a drop is a restarted exporter, the new value all increase) and none counts
across a gap longer than ``max_age``; energy stays empty (None) for a prefix that never got
an energy increase (GPUs without an energy counter), never 0 for "unknown".
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dask_metrics.collector.attribution.prefix_exact import (
    DagMixes,
    Edge,
    SliceMemo,
    attribute_exact,
    attribute_shared,
)
from dask_metrics.collector.attribution.prefix_scrapes import (
    Lookup,
    Together,
    attribute,
    prefix_timeline,
)
from dask_metrics.collector.attribution.prefix_use import PrefixKey, PrefixUse
from dask_metrics.collector.model.lifetimes import job_order, life, plain
from dask_metrics.collector.model.series import (
    NOTHING_RAN,
    Samples,
    Series,
    Timeline,
    WorkerInfo,
    id_key,
)
from dask_metrics.collector.model.tables import gpu_series
from dask_metrics.collector.model.timeline import Changes
from dask_metrics.contract import BUSY, ENERGY, GPU_BY_PREFIX_COLUMNS, MEMORY_USED

# one worker's view of a GPU that several see: its scrape lookup, its DAGs' own times with
# their mixes (None: an older preload) and those times unclipped, its GPU series by metric
View = tuple[Lookup | None, tuple[Changes, DagMixes] | None, Changes, dict[str, Samples]]
NOTHING = (Changes([], []), DagMixes(()))  # the DAG times of a worker that ran none


def seen_by(workers: Iterable[WorkerInfo]) -> dict[str, int]:
    """How many of ``workers`` see each GPU (by UUID)."""
    out: dict[str, int] = {}
    for w in workers:
        for uuid in dict.fromkeys(u for _, u in w.gpus):
            out[uuid] = out.get(uuid, 0) + 1
    return out


class PrefixUses:
    """gpu_by_prefix's sums over the workers of an export, worker by worker, each GPU once.

    A GPU that several workers see (one UUID: ``seen_by`` says by how many) is one device:
    its busy time and energy are split among the tasks executing on any of those workers,
    once, when the last of them has been added (its samples are those of the first); a
    worker with nothing executed adds its GPUs' samples only where they are shared."""

    def __init__(self, max_age: int, seen_by: Mapping[str, int] | None = None,
                 window: tuple[int, int] | None = None) -> None:
        self.max_age = max_age
        self.seen_by = dict(seen_by or {})
        self.window = window  # ms: the range; samples past it cut the intervals at its edges
        self.uses: dict[PrefixKey, PrefixUse] = {}
        self._waiting: dict[tuple[str, tuple[int, int] | None], list[View]] = {}

    def add_worker(self, scrapes: Iterable[int], prefix_series: Sequence[Series],
                   series_by_metric: Mapping[str, Iterable[Series]],
                   ran: Timeline | None = None, part: tuple[int, int] | None = None) -> None:
        """One worker's raw busy, energy and memory-used series (by metric) against what
        executed on it (its dask_job_worker_prefix_tasks series) and, where the preload
        exports them, the DAGs' own times on it (``ran``, an exact ``model.timeline``).

        ``part``: a piece of the range (pieces.Piece.window, edges shared with the pieces
        beside it) whose numbers these are, the samples just outside it included: an
        interval across its edges is cut there, a sample on an edge counts in the later
        piece (the range's end in the last)."""
        window = part or self.window
        gpus = gpu_series(series_by_metric)
        shared = any(self.seen_by.get(uuid, 1) > 1 for _, uuid in gpus)
        exact, changes = None, NOTHING[0]
        if ran is not None and ran.exact:
            changes = Changes.of(ran)
            exact = (changes.clipped(*window) if window else changes, DagMixes(prefix_series))
        # a worker that ran nothing holds no DAG of a shared GPU, whatever its preload
        idle = ran is not None and all(x == NOTHING_RAN for x in ran.states)
        # the scrape-based rule: an older preload's, and a shared GPU's where one of its
        # workers' preloads is older
        lookup = (Lookup(prefix_timeline(scrapes, prefix_series, self.max_age))
                  if prefix_series and (exact is None or shared) else None)
        memo: SliceMemo = {}
        for (_, uuid), metrics in gpus.items():
            if self.seen_by.get(uuid, 1) <= 1:
                if exact is not None:
                    attribute_exact(self.uses, *exact, metrics.get(BUSY.name),
                                    metrics.get(ENERGY.name), metrics.get(MEMORY_USED.name),
                                    self.max_age, self._edge(window, [changes]), memo)
                elif lookup is not None:  # else nothing executed there
                    self._attribute(lookup, metrics, window)
                continue
            views = self._waiting.setdefault((uuid, part), [])
            views.append((lookup, exact if exact is not None or not idle else NOTHING, changes,
                          metrics))
            if len(views) >= self.seen_by[uuid]:
                self._together(self._waiting.pop((uuid, part)), window)

    def result(self) -> dict[PrefixKey, PrefixUse]:
        """The sums, shared GPUs whose other workers added nothing included."""
        for uuid, part in list(self._waiting):
            self._together(self._waiting.pop((uuid, part)), part or self.window)
        return self.uses

    def _edge(self, window: tuple[int, int] | None, changes: list[Changes]) -> Edge | None:
        """The end of a piece that is not the range's, with the workers' changes past it."""
        if window is None or self.window is None or window[1] >= self.window[1]:
            return None
        return window[1], changes

    def _together(self, views: list[View], window: tuple[int, int] | None) -> None:
        metrics = views[0][3]
        exact = [e for _, e, _, _ in views if e is not None]
        if len(exact) == len(views):
            attribute_shared(self.uses, exact, metrics.get(BUSY.name), metrics.get(ENERGY.name),
                             metrics.get(MEMORY_USED.name), self.max_age,
                             self._edge(window, [c for _, _, c, _ in views]))
            return
        lookups = [lookup for lookup, _, _, _ in views if lookup is not None]
        if lookups:
            self._attribute(Together(lookups), metrics, window)

    def _attribute(self, lookup: Lookup | Together, metrics: Mapping[str, Samples],
                   window: tuple[int, int] | None) -> None:
        """The older rules, which credit an interval whole, to its later sample: none across
        the range's edges; a sample on a piece's edge is the later piece's, with the sample
        before it (the previous piece's) that its increment is measured from."""
        def inside(name: str, before: bool = False) -> Samples | None:
            found = metrics.get(name)
            if found is None or not window:
                return found
            times, values = found
            closed = self.window is None or window[1] >= self.window[1]
            i = bisect_left(times, window[0])
            if before and self.window is not None and window[0] > self.window[0]:
                i = max(i - 1, 0)
            j = (bisect_right if closed else bisect_left)(times, window[1])
            return times[i:j], values[i:j]

        attribute(self.uses, lookup, inside(BUSY.name, True), inside(ENERGY.name, True),
                  inside(MEMORY_USED.name), self.max_age)


def prefix_rows(uses: Mapping[PrefixKey, PrefixUse], names: Mapping[str, str]
                ) -> list[dict[str, Any]]:
    """gpu_by_prefix.csv's rows (dicts keyed by GPU_BY_PREFIX_COLUMNS) in job, DAG and
    prefix order; every prefix seen executing at a GPU sample has one, 0 seconds if the GPU
    was idle then."""
    keys = sorted(uses, key=lambda k: (job_order(k[0]), id_key(k[1]), k[2]))
    return [dict(zip(GPU_BY_PREFIX_COLUMNS,
                     (plain(job), names.get(job, ""), dag, prefix,
                      uses[job, dag, prefix].gpu_seconds, uses[job, dag, prefix].peak_mem,
                      uses[job, dag, prefix].energy, life(job)),
                     strict=True))
            for job, dag, prefix in keys]
