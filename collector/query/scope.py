"""Which series a question may see, and the selectors that say it: one Dask cluster's,
some workers', HA replicas' copies as one (pure). Every selector the collector sends is
built here, so that no query forgets the cluster."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dask_metrics.collector.model.series import Series
from dask_metrics.collector.query.promql import label, literal_matchers
from dask_metrics.contract import (
    ACTIVITY_FAMILY,
    BUSY,
    DASK_CLUSTER,
    ENERGY,
    MEMORY_USED,
    REPLICA_LABELS,
    SPECS,
    UUID,
    WORKER,
)


@dataclass(frozen=True)
class Scope:
    """Which series a query may see: those of one Dask cluster (``cluster``; "" is the
    series without a dask_cluster label, from exporters older than the label; None: every
    cluster, unscoped), with ``replica_labels`` left out of a series' identity (HA replicas'
    copies of one series are one series). Every selector the collector sends is built here,
    so no query forgets the cluster."""

    cluster: str | None = None
    replica_labels: tuple[str, ...] = REPLICA_LABELS

    def matchers(self) -> list[str]:
        return [] if self.cluster is None else [f"{DASK_CLUSTER}={label(self.cluster)}"]

    def of(self, metric: str, more: Sequence[str] = (), **labels: str) -> str:
        """``metric{worker="w",dask_cluster="c"}``: one metric, scoped (``more``: other
        matchers)."""
        found = [f"{k}={label(v)}" for k, v in labels.items()] + [*more] + self.matchers()
        return metric + ("{" + ",".join(found) + "}" if found else "")


UNSCOPED = Scope()


Workers = Sequence[str] | str | None
"""Whose series a query selects: one worker, several (one query for a batch), or all."""


def worker_matchers(workers: Workers) -> list[str]:
    """``worker="w"`` for one worker, ``worker=~"a|b"`` (each name matched literally) for
    several, nothing for None."""
    return literal_matchers(WORKER, workers)


def selector(metrics: Sequence[str], workers: Workers = None, scope: Scope = UNSCOPED,
             more: Sequence[str] = ()) -> str:
    """``{__name__=~"a|b",worker="w",dask_cluster="c"}``: one query for several metrics of
    some workers of one cluster (``more``: other matchers)."""
    matchers = [f'__name__=~{label("|".join(metrics))}', *worker_matchers(workers), *more]
    return "{" + ",".join(matchers + scope.matchers()) + "}"


def by_worker(series: Iterable[Series], workers: Sequence[str], name: str = WORKER
              ) -> dict[str, list[Series]]:
    """``series`` by their worker label (or the label ``name``), each of ``workers`` a key
    (an empty list if none)."""
    out: dict[str, list[Series]] = {w: [] for w in workers}
    for s in series:
        found = out.get(s.labels.get(name, ""))
        if found is not None:
            found.append(s)
    return out


_LABELS = {spec.name: spec.labels for spec in SPECS}


def split_label(metric: str) -> str:
    """What a question about every series of ``metric`` is split by: its GPUs' UUIDs where
    its series are a GPU's (or it is not ours), else its workers' names."""
    return WORKER if UUID not in _LABELS.get(metric, (UUID,)) else UUID


ACTIVITY_SERIES = f"{ACTIVITY_FAMILY}.+_total"  # every unit's family (a regex on __name__)


ATTRIBUTION_METRICS = (BUSY.name, ENERGY.name, MEMORY_USED.name)  # gpu_by_prefix reads these
