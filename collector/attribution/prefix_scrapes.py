"""gpu_by_prefix's rule for an older scheduler preload (no DAG times) and a GPU that several
workers see: what executed is the scheduler's last scrape at or before each GPU sample, and
each sample's increase is split among the tasks executing then. Pure."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat

from dask_metrics.collector.attribution.prefix_use import (
    NO_TASKS,
    PrefixKey,
    PrefixUse,
    State,
    by_key,
)
from dask_metrics.collector.model.counters import steps
from dask_metrics.collector.model.series import Samples, Series


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


def prefix_timeline(scrapes: Iterable[int], series: Iterable[Series], max_age: int
                    ) -> PrefixTimeline:
    """From one worker's dask_job_worker_prefix_tasks series and the scheduler's scrape
    times (dask_job_current_job's): the series exists only while above 0, so a scrape
    without it is a scrape where that prefix did not execute there. A state holds until the
    next scrape, at most ``max_age``."""
    executing: dict[int, list[tuple[PrefixKey, float]]] = {}
    for key, (times, values) in by_key(series):
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


class Lookup:
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


class Together:
    """The state ids of one GPU that several workers see: at each time, what executed on
    any of them (their states side by side)."""

    def __init__(self, views: Sequence[Lookup]) -> None:
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
              prefixes: PrefixTimeline | Lookup | Together, busy: Samples | None,
              energy: Samples | None, used: Samples | None, max_age: int) -> None:
    """Add one GPU's samples to ``uses`` by this rule (gpu_by_prefix's docstring words it)."""
    lookup = Lookup(prefixes) if isinstance(prefixes, PrefixTimeline) else prefixes
    for samples, field in ((busy, "gpu_seconds"), (energy, "energy")):
        if samples is None:
            continue
        positions, amounts = steps(samples, max_age)
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
