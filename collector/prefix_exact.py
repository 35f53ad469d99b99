"""gpu_by_prefix's rule where the scheduler preload exports when each worker ran each DAG:
an interval between two GPU samples goes to the DAG that held the worker then (cut where
that changed), and the DAG's share to the prefixes the scheduler saw executing of it. Pure."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import groupby, repeat

from dask_metrics.collector.prefix_use import (
    PrefixKey,
    PrefixUse,
    State,
    by_key,
    increments,
)
from dask_metrics.collector.series import NOTHING_RAN, Samples, Series
from dask_metrics.collector.worker_runs import Changes


class DagMixes:
    """What executed of each DAG on one worker, at each scheduler scrape that showed some of
    it executing there: how a DAG's share of the GPU splits among its prefixes."""

    def __init__(self, series: Iterable[Series]) -> None:
        at: dict[tuple[str, str], dict[int, list[tuple[PrefixKey, float]]]] = {}
        for key, samples in by_key(series):
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
    """Add one GPU's samples to ``uses`` by the DAGs' own times (this module's rule):
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
