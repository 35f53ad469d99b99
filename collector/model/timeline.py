"""What a worker ran when, as a Timeline of (job, dag) states (pure).

Two sources, the first wherever the scheduler preload exports it:

- **the scheduler's own times** (dask_job_worker_dag_start_timestamp_seconds and
  dask_job_worker_dag_end_timestamp_seconds): when the worker's first task of a DAG began
  processing and when its last one stopped. The DAG holds the worker from that start to
  that end, gaps between its tasks included, whatever the scrape interval: a DAG shorter
  than a scrape keeps its edges, and a GPU sample or a dated peak is credited to what ran
  at that instant. The timeline is ``exact``: its points are the edges themselves, so an
  interval between two GPU samples can be split at them.
- **dask_job_worker_tasks at each scheduler scrape** (older preloads): what the worker ran
  then, held until the next scrape; a DAG that began and ended between two scrapes is not
  seen.

Where DAGs overlap on one worker, the oldest (lowest job id, then DAG id) is taken: the
scheduler's own "oldest unfinished DAG", a deterministic choice.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import pairwise, repeat

from dask_metrics.collector.model.lifetimes import job_key, job_order
from dask_metrics.collector.model.series import NOTHING_RAN, Series, Timeline, clip, id_key
from dask_metrics.contract import DAG_ID, WORKER_DAG_END, WORKER_DAG_START, WORKER_TASKS

State = tuple[str, str]
Span = tuple[int, int, State]  # ms: from, to (exclusive); (job, dag)


def _order(state: State) -> tuple:
    return job_order(state[0]), id_key(state[1])


def _state(labels: dict[str, str]) -> State:
    return job_key(labels), labels.get(DAG_ID, "")


def worker_spans(starts: Iterable[Series], ends: Iterable[Series], until: int, max_age: int,
                 scrapes: Sequence[int] = ()) -> list[Span]:
    """Each DAG's stretch on the worker from its start and end series (values in seconds).

    A span whose end series has no sample at or after the start's last one was still open
    then. It ends at that sample (a lower bound: the DAG ended, or its scheduler went away
    with it, before the next scrape) when a later scheduler scrape (``scrapes``, any life,
    read past ``until`` as the span series are) no longer showed it, or when that sample is
    more than ``max_age`` before ``until``; else it runs to ``until`` (the DAG was running
    at the range's end)."""
    closed: dict[State, tuple[int, float]] = {}
    for s in ends:
        if s.times:
            state = _state(s.labels)
            last = max(closed.get(state, (-1, 0.0)), (s.times[-1], max(s.values)))
            closed[state] = last
    spans: list[Span] = []
    for s in starts:
        if not s.times:
            continue
        state = _state(s.labels)
        begin, seen = round(min(s.values) * 1000), s.times[-1]
        end = closed.get(state)
        if end is not None and end[0] >= seen:
            stop = round(end[1] * 1000)
        else:
            gone = bisect_right(scrapes, seen) < len(scrapes)
            stop = until if until - seen <= max_age and not gone else seen
        if stop > begin:
            spans.append((begin, stop, state))
    return spans


def span_timeline(spans: Sequence[Span], max_age: int) -> Timeline:
    """The worker's state from each edge of ``spans`` on (the oldest DAG then holding it),
    with a point at least every ``max_age`` / 2 inside a long stretch: a Timeline's lookup
    holds a state for at most ``max_age``. One sweep over the edges: a day of a busy worker
    has thousands of DAGs."""
    events = sorted([(b, 1, s) for b, _, s in spans] + [(e, -1, s) for _, e, s in spans])
    held: Counter[State] = Counter()
    oldest: list[tuple[tuple, State]] = []  # heap; entries of DAGs no longer held linger
    times: list[int] = []
    states: list[State] = []
    step = max(max_age // 2, 1)
    i = 0
    while i < len(events):
        t = events[i][0]
        while i < len(events) and events[i][0] == t:
            _, change, state = events[i]
            held[state] += change
            if change > 0:
                heappush(oldest, (_order(state), state))
            i += 1
        while oldest and held[oldest[0][1]] <= 0:
            heappop(oldest)
        state = oldest[0][1] if oldest else NOTHING_RAN
        if states and states[-1] != NOTHING_RAN:  # points through the stretch before this edge
            fill = range(times[-1] + step, t, step)
            times += fill
            states += [states[-1]] * len(fill)
        if not states or states[-1] != state:
            times.append(t)
            states.append(state)
    return Timeline(times, states, exact=True)


def scrape_timeline(scrapes: Sequence[int], tasks: Iterable[Series]) -> Timeline:
    """What one worker ran at each scheduler scrape, from its dask_job_worker_tasks series
    (present only while the worker has tasks of that DAG: a scrape without one is idle)."""
    dags = sorted(((_state(s.labels), s) for s in tasks), key=lambda item: _order(item[0]))
    active: dict[int, State] = {}
    for dag, s in dags:
        for t, v in zip(s.times, s.values, strict=True):
            if v > 0:
                active.setdefault(t, dag)  # the oldest DAG with tasks then
    times = sorted(set(scrapes) | active.keys())
    return Timeline(times, list(map(active.get, times, repeat(NOTHING_RAN))))


def worker_timeline(scrapes: Sequence[int], tasks: Iterable[Series],
                    starts: Iterable[Series] = (), ends: Iterable[Series] = (),
                    until: int = 0, max_age: int = 0) -> Timeline:
    """The worker's timeline from the scheduler's own times where exported, else from its
    tasks at each scrape (see the module's docstring)."""
    spans = worker_spans(starts, ends, until, max_age, scrapes)
    return span_timeline(spans, max_age) if spans else scrape_timeline(scrapes, tasks)


RAN_METRICS = [WORKER_TASKS.name, WORKER_DAG_START.name, WORKER_DAG_END.name]
"""The scheduler series a worker's timeline is made of."""


def ran_timeline(found: Mapping[str, list[Series]], scrapes: Sequence[int], until: int,
                 max_age: int) -> Timeline:
    """``worker_timeline`` of a worker's RAN_METRICS series (``found``: by metric)."""
    return worker_timeline(scrapes, found.get(WORKER_TASKS.name, []),
                           found.get(WORKER_DAG_START.name, []),
                           found.get(WORKER_DAG_END.name, []), until, max_age)


SPAN_METRICS = (WORKER_DAG_START.name, WORKER_DAG_END.name)


def within(found: Mapping[str, list[Series]], lo: int, hi: int) -> dict[str, list[Series]]:
    """Scheduler series read past ``hi`` (``presence.lookahead``): the span series whole (a DAG
    running at ``hi`` has its end at a later scrape), every other one clipped to [lo, hi]."""
    return {m: series if m in SPAN_METRICS else clip(series, lo, hi, True)
            for m, series in found.items()}


@dataclass(frozen=True)
class Changes:
    """Where an exact timeline's state changes: from ``times[i]`` on, ``states[i]``. What
    cuts an interval between two GPU samples at the instants the worker's DAG changed."""

    times: list[int]
    states: list[State]

    @classmethod
    def of(cls, timeline: Timeline) -> Changes:
        times: list[int] = []
        states: list[State] = []
        for t, state in zip(timeline.times, timeline.states, strict=True):
            if not states or state != states[-1]:
                times.append(t)
                states.append(state)
        return cls(times, states)

    def clipped(self, lo: int, hi: int) -> Changes:
        """These changes within [lo, hi], nothing running outside it: what cuts a range's
        edge intervals at its edges."""
        a, b = bisect_right(self.times, lo), bisect_left(self.times, hi)
        return Changes([lo, *self.times[a:b], hi], [self.at(lo), *self.states[a:b], NOTHING_RAN])

    def at(self, t: int) -> State:
        """What ran at ``t`` (nothing before the first change)."""
        k = bisect_right(self.times, t)
        return self.states[k - 1] if k else NOTHING_RAN

    def first_from(self, t: int) -> int | None:
        """The first change at or after ``t``, if any."""
        k = bisect_left(self.times, t)
        return self.times[k] if k < len(self.times) else None

    def straddled(self, times: Sequence[int]) -> list[int]:
        """The i of the intervals (times[i-1], times[i]) with a change strictly inside."""
        right = list(map(bisect_right, repeat(self.times), times))
        left = list(map(bisect_left, repeat(self.times), times))
        return [i for i in range(1, len(times)) if left[i] > right[i - 1]]

    def pieces(self, a: int, b: int) -> list[tuple[State, int, int]]:
        """[a, b] cut at the changes strictly inside it: (what ran, from, to) per piece."""
        lo, hi = bisect_right(self.times, a), bisect_left(self.times, b)
        states = [self.at(a), *self.states[lo:hi]]
        return [(state, x, y) for state, (x, y) in
                zip(states, pairwise([a, *self.times[lo:hi], b]), strict=True)]
