"""gpu_by_prefix.csv: GPU busy time, peak memory and energy per job, DAG and task prefix,
attributed from each GPU sample to the prefixes executing on its worker then. Pure.

Rules:

- what ran: ``dask_job_worker_prefix_tasks`` at the scheduler's last scrape at or before the
  GPU sample, at most ``max_age`` old (the as-of join of job and DAG); a scheduler scrape
  without a series of this worker means nothing executed on it;
- busy seconds and energy: the increase of ``dask_gpu_busy_seconds_total`` and
  ``dask_gpu_energy_joules_total`` from a GPU's previous sample to this one (reset-safe:
  a drop is a restarted exporter, the new value all increase; no increase across a gap
  longer than ``max_age``), split among the tasks executing at this sample, each task an
  equal share: a prefix with k of the n tasks gets k/n. With no task executing, nobody
  gets it (idle time);
- peak memory: the largest ``dask_gpu_memory_used_bytes`` of any one GPU of the worker at a
  sample where the prefix executed; not split;
- energy stays empty (None) for a prefix that never got an energy increase (GPUs without
  an energy counter), never 0 for "unknown".
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise, repeat
from typing import Any

from dask_metrics.collector.series import Samples, Series, gpu_series, id_key
from dask_metrics.contract import (
    BUSY,
    DAG_ID,
    ENERGY,
    GPU_BY_PREFIX_COLUMNS,
    JOB_ID,
    MEMORY_USED,
    PREFIX,
)

PrefixKey = tuple[str, str, str]  # job, dag, prefix
State = Mapping[PrefixKey, float]
_NOTHING: dict[PrefixKey, float] = {}


@dataclass(frozen=True)
class PrefixTimeline:
    """The tasks per (job, dag, prefix) executing on one worker at each scheduler scrape."""

    times: list[int]
    states: list[dict[PrefixKey, float]]

    def at_each(self, times: Sequence[int], max_age: int) -> list[dict[PrefixKey, float]]:
        """The state of the last scrape at or before each time, empty when there is none
        or it is older than ``max_age``."""
        scrapes, states = self.times, self.states
        return [states[i - 1] if i and t - scrapes[i - 1] <= max_age else _NOTHING
                for t, i in zip(times, map(bisect_right, repeat(scrapes), times), strict=True)]


def prefix_timeline(scrapes: Iterable[int], series: Iterable[Series]) -> PrefixTimeline:
    """From one worker's dask_job_worker_prefix_tasks series and the scheduler's scrape
    times (dask_job_current_job's): the series exists only while above 0, so a scrape
    without it is a scrape where that prefix did not execute there."""
    active: dict[int, dict[PrefixKey, float]] = {t: {} for t in scrapes}
    for s in series:
        key = (s.labels.get(JOB_ID, ""), s.labels.get(DAG_ID, ""), s.labels.get(PREFIX, ""))
        for t, v in zip(s.times, s.values, strict=True):
            if v > 0:
                state = active.setdefault(t, {})
                state[key] = state.get(key, 0.0) + v
    times = sorted(active)
    return PrefixTimeline(times, [active[t] for t in times])


def increments(samples: Samples, max_gap: int) -> tuple[list[int], list[float]]:
    """(times, increases) of a counter from each sample to the next, at the later one's time:
    reset-safe, none across a gap longer than ``max_gap`` or next to a NaN."""
    times, values = samples
    out_t, out_v = [], []
    for (t0, v0), (t1, v1) in pairwise(zip(times, values, strict=True)):
        if t1 - t0 > max_gap or math.isnan(v0) or math.isnan(v1):
            continue
        out_t.append(t1)
        out_v.append(v1 - v0 if v1 >= v0 else v1)
    return out_t, out_v


@dataclass
class PrefixUse:
    """What one (job, dag, prefix) got: busy seconds, peak memory (bytes), energy (J)."""

    gpu_seconds: float = 0.0
    peak_mem: float | None = None
    energy: float | None = None


def _split(uses: dict[PrefixKey, PrefixUse], states: Iterable[State],
           amounts: Iterable[float], field: str) -> None:
    for state, amount in zip(states, amounts, strict=True):
        tasks = sum(state.values())
        for key, k in state.items():
            use = uses.setdefault(key, PrefixUse())
            share = amount * k / tasks
            setattr(use, field, (getattr(use, field) or 0.0) + share)


def attribute(uses: dict[PrefixKey, PrefixUse], prefixes: PrefixTimeline,
              busy: Samples | None, energy: Samples | None, used: Samples | None,
              max_age: int) -> None:
    """Add one GPU's samples to ``uses`` by the rules of this module."""
    if busy is not None:
        times, amounts = increments(busy, max_age)
        _split(uses, prefixes.at_each(times, max_age), amounts, "gpu_seconds")
    if energy is not None:
        times, amounts = increments(energy, max_age)
        _split(uses, prefixes.at_each(times, max_age), amounts, "energy")
    if used is not None:
        times, values = used
        for state, value in zip(prefixes.at_each(times, max_age), values, strict=True):
            for key in state:
                use = uses.setdefault(key, PrefixUse())
                if not math.isnan(value) and (use.peak_mem is None or value > use.peak_mem):
                    use.peak_mem = value


def add_worker(uses: dict[PrefixKey, PrefixUse], scrapes: Iterable[int],
               prefix_series: Sequence[Series], series_by_metric: Mapping[str, Iterable[Series]],
               max_age: int) -> None:
    """Add every GPU of one worker to ``uses``: its raw busy, energy and memory-used series
    (by metric) against what executed on it (its dask_job_worker_prefix_tasks series)."""
    if not prefix_series:
        return  # nothing executed there, or a scheduler preload without the series
    prefixes = prefix_timeline(scrapes, prefix_series)
    for metrics in gpu_series(series_by_metric).values():
        attribute(uses, prefixes, metrics.get(BUSY.name), metrics.get(ENERGY.name),
                  metrics.get(MEMORY_USED.name), max_age)


def prefix_rows(uses: Mapping[PrefixKey, PrefixUse], names: Mapping[str, str]
                ) -> list[dict[str, Any]]:
    """gpu_by_prefix.csv's rows (dicts keyed by GPU_BY_PREFIX_COLUMNS) in job, DAG and
    prefix order; every prefix seen executing at a GPU sample has one, 0 seconds if the GPU
    was idle then."""
    keys = sorted(uses, key=lambda k: (id_key(k[0]), id_key(k[1]), k[2]))
    return [dict(zip(GPU_BY_PREFIX_COLUMNS,
                     (job, names.get(job, ""), dag, prefix, uses[job, dag, prefix].gpu_seconds,
                      uses[job, dag, prefix].peak_mem, uses[job, dag, prefix].energy),
                     strict=True))
            for job, dag, prefix in keys]
