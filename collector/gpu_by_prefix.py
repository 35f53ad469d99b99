"""gpu_by_prefix.csv: GPU busy time, peak memory and energy per job, DAG and task prefix,
attributed from each GPU sample to the prefixes executing on its worker then. Pure.

Rules, where the scheduler preload exports when each worker ran each DAG (its own times,
see worker_runs):

- which DAG: an interval between two GPU samples belongs to the DAG that held the worker
  then; one in which that changed is cut at the change, each piece taking its share of the
  counters' increase in proportion to time (the report's rule: the same DAG totals);
- which prefixes of it: the DAG's share is split among its tasks executing on the worker at
  the scheduler's last scrape at or before the piece's end that showed some (else the first
  one after), each task an equal share; a DAG that no scrape saw executing there (it ran
  between two) gets one row with an empty prefix: its GPU time is known, its functions not;
- peak memory: the largest ``dask_gpu_memory_used_bytes`` of any one GPU of the worker at a
  sample where the prefix executed by those rules; not split.

With an older preload (no such times) and on a GPU that several workers see:

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

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import count, groupby, islice, repeat
from math import isnan
from operator import sub
from typing import Any

from dask_metrics.collector.lifetimes import job_key, job_order, life, plain
from dask_metrics.collector.series import (
    NOTHING_RAN,
    Samples,
    Series,
    Timeline,
    WorkerInfo,
    id_key,
    join,
)
from dask_metrics.collector.tables import gpu_series
from dask_metrics.collector.worker_runs import Changes
from dask_metrics.contract import (
    BUSY,
    DAG_ID,
    ENERGY,
    GPU_BY_PREFIX_COLUMNS,
    MEMORY_USED,
    PREFIX,
)

PrefixKey = tuple[str, str, str]  # job, dag, prefix
State = tuple[tuple[PrefixKey, float], ...]  # (key, tasks) of what executed, in key order
NO_TASKS: State = ()  # no task executed on the worker


@dataclass(frozen=True)
class PrefixTimeline:
    """What executed on one worker, as of each scheduler scrape: from ``times[i]`` on, the
    state ``states[ids[i]]``. A scrape's state expires ``max_age`` after it (an NO_TASKS entry
    is added there when no scrape follows sooner), so a lookup is one bisection. Few
    distinct states recur over many scrapes: each GPU's samples are first summed per state,
    and only the sums split per task."""

    times: list[int]
    ids: list[int]  # one more than times: ids[0] is before the first scrape (NO_TASKS)
    states: list[State]  # states[0] is NO_TASKS

    def ids_at(self, times: Sequence[int]) -> list[int]:
        """The state id at each of ``times`` (0: NO_TASKS)."""
        return list(map(self.ids.__getitem__, map(bisect_right, repeat(self.times), times)))


def _by_key(series: Iterable[Series]) -> list[tuple[PrefixKey, Samples]]:
    """dask_job_worker_prefix_tasks by (job, dag, prefix), in key order (so that a state's
    items come in that order), the pieces of one key (a restarted scheduler's other
    instance label) joined, so that a key has one count per scrape."""
    pieces: dict[PrefixKey, list[Series]] = {}
    for s in series:
        key = (job_key(s.labels), s.labels.get(DAG_ID, ""), s.labels.get(PREFIX, ""))
        pieces.setdefault(key, []).append(s)
    return [(key, join(pieces[key])) for key in sorted(pieces)]


def prefix_timeline(scrapes: Iterable[int], series: Iterable[Series], max_age: int
                    ) -> PrefixTimeline:
    """From one worker's dask_job_worker_prefix_tasks series and the scheduler's scrape
    times (dask_job_current_job's): the series exists only while above 0, so a scrape
    without it is a scrape where that prefix did not execute there. A state holds until the
    next scrape, at most ``max_age``."""
    executing: dict[int, list[tuple[PrefixKey, float]]] = {}
    for key, (times, values) in _by_key(series):
        for t, v in zip(times, values, strict=True):
            if v > 0:
                executing.setdefault(t, []).append((key, v))
    known: dict[State, int] = {NO_TASKS: 0}
    times, ids = [], [0]
    order = sorted(executing.keys() | set(scrapes))
    last: list[tuple[PrefixKey, float]] | None = None
    sid = 0
    for t, after in zip(order, [*order[1:], None], strict=True):
        state = executing.get(t)
        if state != last:  # most scrapes repeat the one before: no tuple, no hash
            sid = 0 if state is None else known.setdefault(tuple(state), len(known))
            last = state
        times.append(t)
        ids.append(sid)
        if after is None or after > t + max_age + 1:  # expires before the next scrape
            times.append(t + max_age + 1)
            ids.append(0)
    return PrefixTimeline(times, ids, list(known))


class DagMixes:
    """What executed of each DAG on one worker, at each scheduler scrape that showed some of
    it executing there: how a DAG's share of the GPU splits among its prefixes."""

    def __init__(self, series: Iterable[Series]) -> None:
        at: dict[tuple[str, str], dict[int, list[tuple[PrefixKey, float]]]] = {}
        for key, samples in _by_key(series):
            for t, v in zip(*samples, strict=True):
                if v > 0:
                    at.setdefault(key[:2], {}).setdefault(t, []).append((key, v))
        self._times = {dag: sorted(mixes) for dag, mixes in at.items()}
        self._mixes = {dag: [tuple(at[dag][t]) for t in times]
                       for dag, times in self._times.items()}

    def ids(self, dag: tuple[str, str], times: Iterable[int]) -> list[int]:
        """The mix of ``dag`` at each of ``times`` as an index into ``mixes(dag)``: the last
        scrape at or before it that showed the DAG executing, else the first one after."""
        return [max(k - 1, 0) for k in map(bisect_right, repeat(self._times.get(dag, [])),
                                           times)]

    def mixes(self, dag: tuple[str, str]) -> list[State]:
        """The mixes of ``dag``; one of its own with an empty prefix where no scrape saw it."""
        return self._mixes.get(dag) or [(((*dag, ""), 1.0),)]


def attribute_exact(uses: dict[PrefixKey, PrefixUse], changes: Changes, mixes: DagMixes,
                    busy: Samples | None, energy: Samples | None, used: Samples | None,
                    max_age: int) -> None:
    """Add one GPU's samples to ``uses`` by the DAGs' own times (the module's first rules):
    amounts are summed per DAG and mix before they are split among prefixes, and only the
    intervals cut by a change (a few per DAG) are cut into pieces."""
    for samples, field in ((busy, "gpu_seconds"), (energy, "energy")):
        if samples is None:
            continue
        times = samples[0]
        positions, amounts = increments(samples, max_age)
        cut = set(changes.straddled(times))
        whole = [(i, a) for i, a in zip(positions, amounts, strict=True) if i not in cut]
        starts = [times[i - 1] for i, _ in whole]
        parts: list[tuple[tuple[str, str], int, float]] = [
            (dag, times[i], a) for (i, a), dag in zip(whole, map(changes.at, starts),
                                                       strict=True)]
        for i, a in zip(positions, amounts, strict=True):
            if i in cut:
                t0, t1 = times[i - 1], times[i]
                parts += [(dag, y, a * (y - x) / (t1 - t0))
                          for dag, x, y in changes.pieces(t0, t1)]
        _credit(uses, field, parts, mixes, sum)
    if used is not None:
        _credit(uses, "peak_mem", [(dag, t, v) for t, v, dag in zip(
            *used, map(changes.at, used[0]), strict=True) if not math.isnan(v)], mixes, max)


def _credit(uses: dict[PrefixKey, PrefixUse], field: str,
            parts: Iterable[tuple[tuple[str, str], int, float]], mixes: DagMixes,
            fold: Callable[[Iterable[float]], float]) -> None:
    """Each (DAG, time, amount) of ``parts`` to the prefixes of the DAG's mix at that time:
    ``sum`` splits an amount among the mix's tasks, ``max`` gives each prefix the largest."""
    by_dag: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for dag, t, amount in parts:
        if dag != NOTHING_RAN:
            times, amounts = by_dag.setdefault(dag, ([], []))
            times.append(t)
            amounts.append(amount)
    for dag, (times, amounts) in by_dag.items():
        ids = mixes.ids(dag, times)
        order = sorted(range(len(ids)), key=ids.__getitem__)
        states = mixes.mixes(dag)
        for sid, run in groupby(order, key=ids.__getitem__):
            total = fold(amounts[k] for k in run)
            tasks = sum(n for _, n in states[sid])
            for key, n in states[sid]:
                use = uses.setdefault(key, PrefixUse())
                old = getattr(use, field)
                value = total * n / tasks if fold is sum else total
                setattr(use, field, value if old is None else fold((old, value)))


def increments(samples: Samples, max_gap: int) -> tuple[list[int], list[float]]:
    """(positions, increases) of a counter from each sample to the next, at the later
    sample's position: reset-safe, none across a gap longer than ``max_gap`` or next to a
    NaN (v == v is False for NaN only)."""
    times, values = samples
    later, after = islice(times, 1, None), islice(values, 1, None)
    steps = list(map(sub, after, values))  # the usual case: every step kept, at C speed
    if (not any(map(isnan, steps)) and min(steps, default=0.0) >= 0
            and max(map(sub, later, times), default=0) <= max_gap):
        return list(range(1, len(times))), steps
    kept = [(i, v1 - v0 if v1 >= v0 else v1)
            for i, t0, t1, v0, v1 in zip(count(1), times, islice(times, 1, None), values,
                                         islice(values, 1, None))  # the shortest: n - 1
            if t1 - t0 <= max_gap and v0 == v0 and v1 == v1]
    return [i for i, _ in kept], [d for _, d in kept]


@dataclass
class PrefixUse:
    """What one (job, dag, prefix) got: busy seconds, peak memory (bytes), energy (J)."""

    gpu_seconds: float = 0.0
    peak_mem: float | None = None
    energy: float | None = None


def _per_state(ids: Iterable[int], amounts: Sequence[float],
               fold: Callable[[Iterable[float]], float]) -> dict[int, float]:
    """``amounts`` folded (sum, max) per state id, NO_TASKS left out. A state holds for many
    samples in a row, so the runs are folded at C speed."""
    out: dict[int, float] = {}
    pos = 0
    for sid, run in groupby(ids):
        n = len(list(run))
        if sid:
            value = fold(amounts[pos:pos + n])
            out[sid] = fold((out[sid], value)) if sid in out else value
        pos += n
    return out


class _Lookup:
    """The state ids at a GPU's sample times: its series (and its worker's other GPUs)
    mostly share one list of times, looked up once."""

    def __init__(self, prefixes: PrefixTimeline) -> None:
        self.prefixes = prefixes
        self.states = prefixes.states
        self.times: list[int] | None = None
        self.ids: list[int] = []

    def __call__(self, times: list[int]) -> list[int]:
        if times != self.times:
            self.times, self.ids = times, self.prefixes.ids_at(times)
        return self.ids


class _Together:
    """The state ids of one GPU that several workers see: at each time, what executed on
    any of them (their states side by side)."""

    def __init__(self, views: Sequence[_Lookup]) -> None:
        self.views = views
        self.states: list[State] = [NO_TASKS]
        self._known: dict[tuple[int, ...], int] = {}

    def __call__(self, times: list[int]) -> list[int]:
        known = self._known
        out = []
        for ids in zip(*(view(times) for view in self.views), strict=True):
            sid = known.get(ids)
            if sid is None:
                state = tuple(item for view, i in zip(self.views, ids, strict=True)
                              for item in view.states[i])
                sid = known[ids] = len(self.states) if state else 0
                if state:
                    self.states.append(state)
            out.append(sid)
        return out


def attribute(uses: dict[PrefixKey, PrefixUse],
              prefixes: PrefixTimeline | _Lookup | _Together, busy: Samples | None,
              energy: Samples | None, used: Samples | None, max_age: int) -> None:
    """Add one GPU's samples to ``uses`` by the rules of this module."""
    lookup = _Lookup(prefixes) if isinstance(prefixes, PrefixTimeline) else prefixes
    for samples, field in ((busy, "gpu_seconds"), (energy, "energy")):
        if samples is None:
            continue
        positions, amounts = increments(samples, max_age)
        ids = map(lookup(samples[0]).__getitem__, positions)
        states = lookup.states
        for sid, amount in _per_state(ids, amounts, sum).items():
            tasks = sum(k for _, k in states[sid])
            for key, k in states[sid]:
                use = uses.setdefault(key, PrefixUse())
                setattr(use, field, (getattr(use, field) or 0.0) + amount * k / tasks)
    if used is not None:
        times, values = used
        if any(map(math.isnan, values)):  # NaN is never a peak
            values = [-math.inf if math.isnan(v) else v for v in values]
        for sid, peak in _per_state(lookup(times), values, max).items():
            for key, _ in lookup.states[sid]:
                use = uses.setdefault(key, PrefixUse())
                if peak > -math.inf and (use.peak_mem is None or peak > use.peak_mem):
                    use.peak_mem = peak


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
        self._waiting: dict[str, list[tuple[_Lookup | None, dict[str, Samples]]]] = {}

    def add_worker(self, scrapes: Iterable[int], prefix_series: Sequence[Series],
                   series_by_metric: Mapping[str, Iterable[Series]],
                   ran: Timeline | None = None) -> None:
        """One worker's raw busy, energy and memory-used series (by metric) against what
        executed on it (its dask_job_worker_prefix_tasks series) and, where the preload
        exports them, the DAGs' own times on it (``ran``, an exact worker_runs timeline)."""
        gpus = gpu_series(series_by_metric)
        shared = any(self.seen_by.get(uuid, 1) > 1 for _, uuid in gpus)
        exact = None
        if ran is not None and ran.exact:
            changes = Changes.of(ran)
            exact = (changes.clipped(*self.window) if self.window else changes,
                     DagMixes(prefix_series))
        # the scrape-based rule: an older preload's, and a shared GPU's
        lookup = (_Lookup(prefix_timeline(scrapes, prefix_series, self.max_age))
                  if prefix_series and (exact is None or shared) else None)
        for (_, uuid), metrics in gpus.items():
            if self.seen_by.get(uuid, 1) <= 1:
                if exact is not None:
                    attribute_exact(self.uses, *exact, metrics.get(BUSY.name),
                                    metrics.get(ENERGY.name), metrics.get(MEMORY_USED.name),
                                    self.max_age)
                elif lookup is not None:  # else nothing executed there
                    self._attribute(lookup, metrics)
                continue
            views = self._waiting.setdefault(uuid, [])
            views.append((lookup, metrics))
            if len(views) >= self.seen_by[uuid]:
                self._together(self._waiting.pop(uuid))

    def result(self) -> dict[PrefixKey, PrefixUse]:
        """The sums, shared GPUs whose other workers added nothing included."""
        for uuid in list(self._waiting):
            self._together(self._waiting.pop(uuid))
        return self.uses

    def _together(self, views: list[tuple[_Lookup | None, dict[str, Samples]]]) -> None:
        lookups = [lookup for lookup, _ in views if lookup is not None]
        if lookups:
            self._attribute(_Together(lookups), views[0][1])

    def _attribute(self, lookup: _Lookup | _Together, metrics: Mapping[str, Samples]) -> None:
        """The older rules, which credit an interval whole: none across the range's edges."""
        def inside(name: str) -> Samples | None:
            found = metrics.get(name)
            if found is None or not self.window:
                return found
            times, values = found
            i, j = bisect_left(times, self.window[0]), bisect_right(times, self.window[1])
            return times[i:j], values[i:j]

        attribute(self.uses, lookup, inside(BUSY.name), inside(ENERGY.name),
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
