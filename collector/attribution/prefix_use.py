"""What a task prefix got of a GPU, and what both of gpu_by_prefix's rules read the same
way: the prefix-task series by (job, DAG, prefix), and a counter's increases. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dask_metrics.collector.model.lifetimes import job_key
from dask_metrics.collector.model.series import Samples, Series, join
from dask_metrics.contract import DAG_ID, PREFIX

PrefixKey = tuple[str, str, str]  # job, dag, prefix
State = tuple[tuple[PrefixKey, float], ...]  # (key, tasks) of what executed, in key order
NO_TASKS: State = ()  # no task executed on the worker


@dataclass(slots=True)
class PrefixUse:
    """What one (job, dag, prefix) got: busy seconds, peak memory (bytes), energy (J)."""

    gpu_seconds: float = 0.0
    peak_mem: float | None = None
    energy: float | None = None



def by_key(series: Iterable[Series]) -> list[tuple[PrefixKey, Samples]]:
    """dask_job_worker_prefix_tasks by (job, dag, prefix), in key order (so that a state's
    items come in that order), the pieces of one key (a restarted scheduler's other
    instance label) joined, so that a key has one count per scrape."""
    pieces: dict[PrefixKey, list[Series]] = {}
    for s in series:
        key = (job_key(s.labels), s.labels.get(DAG_ID, ""), s.labels.get(PREFIX, ""))
        pieces.setdefault(key, []).append(s)
    return [(key, join(pieces[key])) for key in sorted(pieces)]
