"""gpu_by_prefix's rule where the scheduler preload exports when each worker ran each DAG:
an interval between two GPU samples goes to the DAG that held the worker then (cut where
that changed), and the DAG's share to the prefixes the scheduler saw executing of it. Pure."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby, pairwise, repeat

from dask_metrics.collector.attribution.prefix_use import (
    PrefixKey,
    PrefixUse,
    State,
    by_key,
)
from dask_metrics.collector.model.counters import steps
from dask_metrics.collector.model.series import NOTHING_RAN, Samples, Series
from dask_metrics.collector.model.timeline import Changes


class DagMixes:
    """What executed of each DAG on one worker, at each scheduler scrape that showed some of
    it executing there: how a DAG's share of the GPU splits among its prefixes. A scrape
    that shows the same mix as the one before adds nothing: the mix holds from the first
    of them on, so a DAG's amounts are summed over the whole stretch before they are split."""

    def __init__(self, series: Iterable[Series]) -> None:
        at: dict[tuple[str, str], dict[int, list[tuple[PrefixKey, float]]]] = {}
        for key, samples in by_key(series):
            for t, v in zip(*samples, strict=True):
                if v > 0:
                    at.setdefault(key[:2], {}).setdefault(t, []).append((key, v))
        self._times: dict[tuple[str, str], list[int]] = {}
        self._mixes: dict[tuple[str, str], list[State]] = {}
        for dag, found in at.items():
            times, mixes = self._times.setdefault(dag, []), self._mixes.setdefault(dag, [])
            for t in sorted(found):
                mix = tuple(found[t])
                if not mixes or mix != mixes[-1]:
                    times.append(t)
                    mixes.append(mix)
        # each mix's tasks in all, asked for every GPU and amount the mix takes a share of
        self._tasks = {dag: [sum(n for _, n in mix) for mix in mixes]
                       for dag, mixes in self._mixes.items()}

    def ids(self, dag: tuple[str, str], times: Iterable[int]) -> list[int]:
        """The mix of ``dag`` at each of ``times`` as an index into ``mixes(dag)``: the last
        scrape at or before it that showed the DAG executing, else the first one after."""
        return [max(k - 1, 0) for k in map(bisect_right, repeat(self._times.get(dag, [])),
                                           times)]

    def mixes(self, dag: tuple[str, str]) -> list[State]:
        """The mixes of ``dag``; one of its own with an empty prefix where no scrape saw it."""
        return self._mixes.get(dag) or [(((*dag, ""), 1.0),)]

    def tasks(self, dag: tuple[str, str]) -> list[float]:
        """The tasks in each of ``mixes(dag)``."""
        return self._tasks.get(dag) or [1.0]


Edge = tuple[int, Sequence[Changes]]
"""The end of a piece of a longer range (pieces.Piece.window) that is not the range's, and
each worker's changes past it: an interval across it is cut there, but the mix of its part
before it is where the whole range's would be taken (``_mix_at``)."""


def _mix_at(y: int, t1: int, edge: Edge | None) -> int:
    """Where the part of an interval (…, t1) that ends at ``y`` takes its DAG's mix: at ``y``
    (a change of DAG, or the interval's end), unless ``y`` is a piece's edge: then at the
    first change of any of the workers from there, or ``t1``."""
    if edge is None or y != edge[0]:
        return y
    return min([t1, *(t for c in edge[1] if (t := c.first_from(y)) is not None)])


def attribute_exact(uses: dict[PrefixKey, PrefixUse], changes: Changes, mixes: DagMixes,
                    busy: Samples | None, energy: Samples | None, used: Samples | None,
                    max_age: int, edge: Edge | None = None, memo: SliceMemo | None = None
                    ) -> None:
    """Add one GPU's samples to ``uses`` by the DAGs' own times (this module's rule):
    amounts are summed per DAG and mix before they are split among prefixes, and only the
    intervals cut by a change (a few per DAG) are cut into pieces.

    A GPU has thousands of intervals and a DAG and mix hold for many in a row, so the
    intervals are taken run by run (one DAG and mix each), each run summed as one slice.
    ``memo``: a dict kept over the GPUs of one worker (see SliceMemo)."""
    for samples, field in ((busy, "gpu_seconds"), (energy, "energy")):
        if samples is None:
            continue
        times = samples[0]
        positions, amounts = steps(samples, max_age)
        cut = set(changes.straddled(times))
        whole = [k for k, i in enumerate(positions) if i not in cut] if cut \
            else range(len(positions))
        totals = _by_run(changes, mixes, [times[positions[k] - 1] for k in whole],
                         [times[positions[k]] for k in whole],
                         [amounts[k] for k in whole] if cut else amounts, sum, memo)
        for i, a in zip(positions, amounts, strict=True):
            if i in cut:
                t0, t1 = times[i - 1], times[i]
                for dag, x, y in changes.pieces(t0, t1):
                    if dag != NOTHING_RAN:
                        mine = totals.setdefault(dag, {})
                        sid = mixes.ids(dag, (_mix_at(y, t1, edge),))[0]
                        mine[sid] = mine.get(sid, 0.0) + a * (y - x) / (t1 - t0)
        _credit(uses, field, totals, mixes, True)
    _peaks(uses, [(changes, mixes)], used, memo)


def attribute_shared(uses: dict[PrefixKey, PrefixUse],
                     views: Sequence[tuple[Changes, DagMixes]], busy: Samples | None,
                     energy: Samples | None, used: Samples | None, max_age: int,
                     edge: Edge | None = None) -> None:
    """Add a GPU that several workers see (one device, its samples one worker's) by their
    DAGs' own times: an interval is cut wherever any of them changed DAG, each piece split
    equally among the workers holding a DAG then, and each one's share goes to its DAG's mix
    on it. Its peaks: each sample to the DAG of every worker holding one then.

    A DAG that no scheduler scrape saw executing keeps its share under an empty prefix, as
    on a GPU of its own, where a rule that looked only at the scrapes would drop it."""
    for samples, field in ((busy, "gpu_seconds"), (energy, "energy")):
        if samples is None:
            continue
        times = samples[0]
        totals: list[dict[tuple[str, str], dict[int, float]]] = [{} for _ in views]
        for i, a in zip(*steps(samples, max_age), strict=True):
            t0, t1 = times[i - 1], times[i]
            cuts = sorted({t0, t1, *(x for changes, _ in views
                                     for _, x, _ in changes.pieces(t0, t1))})
            for x, y in pairwise(cuts):
                holders = [(k, dag) for k, dag in enumerate(c.at(x) for c, _ in views)
                           if dag != NOTHING_RAN]
                for k, dag in holders:
                    mine = totals[k].setdefault(dag, {})
                    sid = views[k][1].ids(dag, (_mix_at(y, t1, edge),))[0]
                    mine[sid] = mine.get(sid, 0.0) + a * (y - x) / (t1 - t0) / len(holders)
        for (_, mixes), total in zip(views, totals, strict=True):
            _credit(uses, field, total, mixes, True)
    _peaks(uses, views, used)


def _peaks(uses: dict[PrefixKey, PrefixUse], views: Sequence[tuple[Changes, DagMixes]],
           used: Samples | None, memo: SliceMemo | None = None) -> None:
    """Each memory-used sample to the DAG each of ``views`` ran then, its mix's prefixes
    keeping the largest (``memo``: of the one view there is)."""
    if used is None:
        return
    kept = [(t, v) for t, v in zip(*used, strict=True) if not math.isnan(v)]
    at, values = [t for t, _ in kept], [v for _, v in kept]
    for changes, mixes in views:
        _credit(uses, "peak_mem", _by_run(changes, mixes, at, at, values, max, memo), mixes,
                False)


Slices = list[tuple[tuple[str, str], int, int, int]]
"""(DAG, mix, start, end) of each run of amounts with one DAG and mix, in order."""
SliceMemo = dict[tuple[tuple[int, ...], tuple[int, ...]], Slices]
"""One worker's slices by the sample times they were found for: its GPUs are scraped
together, so their busy time, energy and memory fall into the same runs."""


def _by_run(changes: Changes, mixes: DagMixes, starts: Sequence[int], ends: Sequence[int],
            amounts: Sequence[float], fold: Callable[[Iterable[float]], float],
            memo: SliceMemo | None = None) -> dict[tuple[str, str], dict[int, float]]:
    """{DAG: {mix: amount}} of amounts whose DAG is what ran at their ``starts`` and whose
    mix is the DAG's at their ``ends`` (both in time order), folded per run of one DAG and
    mix; what ran nothing is left out. ``memo``: the slices of the same worker's (the same
    ``changes`` and ``mixes``) earlier calls."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for dag, sid, a, b in _slices(changes, mixes, starts, ends, memo):
        mine = out.setdefault(dag, {})
        value = fold(amounts[a:b])
        old = mine.get(sid)
        mine[sid] = value if old is None else fold((old, value))
    return out


def _slices(changes: Changes, mixes: DagMixes, starts: Sequence[int], ends: Sequence[int],
            memo: SliceMemo | None) -> Slices:
    if memo is None:
        return _find_slices(changes, mixes, starts, ends)
    key = (tuple(starts), tuple(ends))
    if key not in memo:
        memo[key] = _find_slices(changes, mixes, starts, ends)
    return memo[key]


def _find_slices(changes: Changes, mixes: DagMixes, starts: Sequence[int],
                 ends: Sequence[int]) -> Slices:
    out: Slices = []
    for k, a, b in _runs(map(bisect_right, repeat(changes.times), starts)):
        dag = changes.states[k - 1] if k else NOTHING_RAN
        if dag != NOTHING_RAN:
            out += [(dag, sid, a + c, a + d) for sid, c, d in _runs(mixes.ids(dag, ends[a:b]))]
    return out


def _runs(keys: Iterable[int]) -> list[tuple[int, int, int]]:
    """(key, start, end) of each run of equal ``keys``."""
    out = []
    pos = 0
    for key, run in groupby(keys):
        end = pos + len(list(run))
        out.append((key, pos, end))
        pos = end
    return out


def _credit(uses: dict[PrefixKey, PrefixUse], field: str,
            totals: dict[tuple[str, str], dict[int, float]], mixes: DagMixes, adding: bool
            ) -> None:
    """Each DAG's amount per mix to the prefixes of that mix: ``adding`` splits an amount
    among the mix's tasks (busy time, energy), else each prefix gets the largest (memory)."""
    for dag, by_mix in totals.items():
        states, counts = mixes.mixes(dag), mixes.tasks(dag)
        for sid in sorted(by_mix):
            total, tasks = by_mix[sid], counts[sid]
            for key, n in states[sid]:
                use = uses.setdefault(key, PrefixUse())
                old = getattr(use, field)
                value = total * n / tasks if adding else total
                setattr(use, field, value if old is None else old + value if adding
                        else max(old, value))
