"""Per-GPU tables of one worker (pure): its GPUs' series joined on their sample times, the
worker's own columns and its job/DAG joined as-of to them, as an export writes them."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from dask_metrics.collector.model.columns import TOTAL_METRIC, USED_METRIC, Column
from dask_metrics.collector.model.series import Samples, Series, Timeline, id_key, join

GpuKey = tuple[str, str]


def gpu_order(key: GpuKey) -> tuple:
    return id_key(key[0]), key[1]


def gpu_series(series_by_metric: Mapping[str, Iterable[Series]]
               ) -> dict[GpuKey, dict[str, Samples]]:
    """{(gpu, uuid): {metric: (times, values)}}, GPUs in GPU order, only metrics with samples.
    A restarted worker's series (other labels, same GPU) join again here; a single series is
    taken as it is."""
    found: dict[GpuKey, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for metric, series in series_by_metric.items():
        for s in series:
            if s.times:
                found[s.labels.get("gpu", ""), s.labels.get("uuid", "")][metric].append(s)
    return {key: {metric: join(pieces) for metric, pieces in found[key].items()}
            for key in sorted(found, key=gpu_order)}


class GpuTable(NamedTuple):
    """One GPU's rows column-wise: its sample times and, per CSV column, the values then."""

    gpu: str
    uuid: str
    times: list[int]
    columns: list[list[float | None]]


@dataclass(frozen=True)
class WorkerTable:
    """One worker's GPUs (in GPU order) and the job/DAG states at their sample times.

    ``times`` are the sample times of all its GPUs, oldest first: usually every GPU has them
    all, since one scrape samples every GPU.
    """

    gpus: list[GpuTable]
    times: list[int]
    cluster: list[tuple[str, str]]
    worker: list[tuple[str, str]]
    # rows picked for a chart (report.chart_rows): each stop in the samples is a row
    # without values, where a chart drawn from every row finds the stops itself
    thinned: bool = False

    @property
    def rows(self) -> int:
        return sum(len(g.times) for g in self.gpus)


def joined(tables: Iterable[WorkerTable]) -> WorkerTable:
    """Consecutive pieces' tables as one: each GPU's rows in order (a GPU missing from a
    piece has none there)."""
    gpus: dict[tuple[str, str], GpuTable] = {}
    times: list[int] = []
    cluster: list[tuple[str, str]] = []
    worker: list[tuple[str, str]] = []
    thinned = False
    for table in tables:
        for g in table.gpus:
            found = gpus.setdefault((g.gpu, g.uuid), GpuTable(g.gpu, g.uuid, [],
                                                              [[] for _ in g.columns]))
            found.times.extend(g.times)
            for mine, more in zip(found.columns, g.columns, strict=True):
                mine.extend(more)
        times += table.times
        cluster += table.cluster
        worker += table.worker
        thinned = thinned or table.thinned
    return WorkerTable(list(gpus.values()), times, cluster, worker, thinned)


def _union(lists: Sequence[list[int]]) -> list[int]:
    """The sorted union of sorted lists; the first list itself when they are all equal."""
    if not lists:
        return []
    if all(other == lists[0] for other in lists[1:]):
        return lists[0]
    return sorted(set().union(*lists))


def _at(samples: Samples | None, times: list[int]) -> list[float | None]:
    """The values of ``samples`` at ``times``, None where it has none: nothing is
    interpolated, gaps stay gaps."""
    if samples is None:
        return [None] * len(times)
    if samples[0] == times:
        return samples[1]
    return list(map(dict(zip(*samples, strict=True)).get, times))


def as_of(samples: Samples | None, times: Sequence[int], max_age: int) -> list[float | None]:
    """The value of the last sample at or before each of ``times``, None where there is
    none or it is older than ``max_age`` (a worker's series joined to its GPU samples)."""
    if samples is None:
        return [None] * len(times)
    stamps, values = samples
    return [values[i - 1] if i and t - stamps[i - 1] <= max_age else None
            for t, i in zip(times, map(bisect_right, repeat(stamps), times), strict=True)]


def joined_by_metric(series_by_metric: Mapping[str, Iterable[Series]]) -> dict[str, Samples]:
    """{metric: (times, values)}: each metric's series joined into one (a worker's series
    from a restarted scheduler carry other instance labels; the first piece wins a tie)."""
    out = {}
    for metric, series in series_by_metric.items():
        if any(s.times for s in series):
            out[metric] = join(series)
    return out


def worker_table(series_by_metric: Mapping[str, Iterable[Series]], columns: Sequence[Column],
                 cluster: Timeline, worker: Timeline, max_age: int,
                 worker_series: Mapping[str, Samples] | None = None) -> WorkerTable:
    """Rows at every time one of the columns' series has a sample, column by column.

    A column whose series has no sample at that time stays empty (None). ``mem-util``
    divides by the total of the same scrape. A GPU with no sample in these columns has no
    rows. The job/DAG lookups are made once per sample time, not once per GPU. Worker
    columns (``worker_series``, from joined_by_metric) take the worker's last sample at most
    ``max_age`` old at each GPU sample; they add no rows (with only worker columns, the rows
    are the samples of memory used).
    """
    timed = [c.metric for c in columns if not c.per_worker] or [USED_METRIC]
    gpus = []
    for (gpu, uuid), metrics in gpu_series(series_by_metric).items():
        times = _union([metrics[m][0] for m in dict.fromkeys(timed) if m in metrics])
        if times:
            totals = _at(metrics.get(TOTAL_METRIC), times)
            gpus.append(GpuTable(gpu, uuid, times, [
                c.values(as_of((worker_series or {}).get(c.metric), times, max_age)
                         if c.per_worker else _at(metrics.get(c.metric), times), totals)
                for c in columns]))
    every = _union([g.times for g in gpus])
    return WorkerTable(gpus, every, cluster.at_each(every, max_age), worker.at_each(every, max_age))
