"""Where the time went, per job, DAG and task prefix: Dask's fine performance metrics,
attributed to the tracker's jobs and DAGs.

Pure, no Dask import. The scheduler plugin tells it which DAG put how many tasks of which
prefix into which Dask span (``observe``, at graph submission), hands it what every worker
heartbeat adds to Dask's spans (``add``: ``{("execute", span_id, prefix, activity, unit):
value}``, the very deltas Dask's spans extension receives), and reads its counters at scrape
time (``series``). Nothing here runs per task transition.

Attribution of the time (or bytes...) of one (span, prefix), per heartbeat:

- one DAG put tasks of that prefix in that span: all of it is that DAG's (exact);
- several DAGs of one job did: the job's, with ``dag_id=""`` (exact for the job);
- several jobs did (e.g. two clients' graphs in Dask's shared default span, both running
  ``inc``): each job gets a share in proportion to the tasks it put there (an estimate),
  ``dag_id`` as above within the job;
- nobody known did (tasks submitted before the preload, or all their DAGs forgotten):
  ``job_id="" dag_id=""``, so the sums over jobs still match Dask's own totals.

Bounded: per job (and the unattributed bucket) at most ``max_prefixes`` prefixes get a
series, later ones are added up under ``other``; a prefix keeps its series once it has one,
so no counter ever moves. A DAG's counters go when the tracker forgets the DAG, the
``dag_id=""`` ones when it forgets the job. Counters only grow: negative or NaN values
(possible from a custom ``digest_metric``) are not counted.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import NamedTuple

from dask_metrics.contract import OTHER_PREFIX, safe_unit
from dask_metrics.exporter.job_model import Dag, Job
from dask_metrics.exporter.label_values import clean_label

Pair = tuple[Hashable, str]  # (span id, task prefix)
Total = tuple["Job | None", "Dag | None", str, str, str]  # job, dag, prefix, activity, unit
_NAMES_CACHE = 10_000  # (activity, unit) spellings remembered cleaned


class Activity(NamedTuple):
    """One exported counter."""

    unit: str
    job_id: str
    dag_id: str
    prefix: str
    activity: str
    value: float


def activity_label(parts: Iterable[object], max_length: int) -> str:
    """An activity label from the parts of a Dask metric key between its context (and
    span, prefix) and its unit: one part as is, several (a tuple label) joined by ":"."""
    text = ":".join(
        ":".join(map(str, p)) if isinstance(p, tuple) else str(p) for p in parts)
    return clean_label(text, max_length)


class ActivityLedger:
    """Monotonic counters of Dask's execute metrics per job, DAG, prefix, activity, unit.

    Thread-safe: heartbeats and the tracker's evictions arrive on the scheduler's event
    loop, a scrape may come from another thread.
    """

    def __init__(self, max_prefixes: int = 50, label_max_length: int = 128,
                 on_new_series: Callable[[Dag], None] | None = None) -> None:
        self.max_prefixes = max_prefixes
        self.label_max_length = label_max_length
        # told of each counter a DAG gains (under the lock, on the heartbeat's thread): the
        # tracker's series budget counts a finished DAG's counters that arrive after a scrape
        self._on_new_series = on_new_series
        self._lock = threading.Lock()
        self._owners: dict[Pair, dict[Dag, int]] = {}  # (span, prefix) -> DAG -> tasks
        self._owned: dict[Dag, list[Pair]] = {}  # the reverse, to forget a DAG
        self._shares: dict[Pair, list[tuple[Job | None, Dag | None, float]]] = {}
        self._totals: dict[Total, float] = {}
        self._totals_of: dict[Dag | Job | None, set[Total]] = {}  # to forget a DAG, a job
        self._prefixes: dict[Job | None, dict[str, str]] = {}  # raw prefix -> its label
        self._names: dict[tuple[Hashable, Hashable], tuple[str, str]] = {}

    # -- fed by the plugin ---------------------------------------------------------------

    def observe(self, dag: Dag, tasks: Mapping[Pair, int]) -> None:
        """``dag`` put ``tasks[(span id, prefix)]`` tasks of that prefix into that span
        (nothing to keep for a DAG the tracker forgot already: one done at submission)."""
        if not tasks or dag.forgotten:
            return
        with self._lock:
            owned = self._owned.setdefault(dag, [])
            for pair, count in tasks.items():
                owners = self._owners.setdefault(pair, {})
                if dag not in owners:
                    owned.append(pair)
                owners[dag] = owners.get(dag, 0) + count
                self._shares.pop(pair, None)

    def add(self, deltas: Mapping[Hashable, float]) -> None:
        """What one worker heartbeat added to the spans; keys other than
        ("execute", span_id, prefix, activity, unit) are ignored (p2p repeats execute)."""
        with self._lock:
            for key, value in deltas.items():
                if not (isinstance(key, tuple) and len(key) == 5 and key[0] == "execute"):
                    continue
                if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                    continue
                _, span_id, prefix, activity, unit = key
                prefix = str(prefix)
                act, u = self._name(activity, unit)
                for job, dag, share in self._share((span_id, prefix)):
                    self._count((job, dag, self._slot(job, prefix), act, u), value * share)

    def forget(self, what: Dag | Job) -> None:
        """The tracker forgot a DAG (its counters go) or a job (its dag_id="" counters and
        its prefix slots go)."""
        with self._lock:
            for total in self._totals_of.pop(what, ()):
                self._totals.pop(total, None)
            if isinstance(what, Job):
                self._prefixes.pop(what, None)
                return
            for pair in self._owned.pop(what, ()):
                owners = self._owners.get(pair)
                if owners is not None:
                    owners.pop(what, None)
                    if not owners:
                        del self._owners[pair]
                self._shares.pop(pair, None)

    def counters_of(self, dag: Dag) -> int:
        """How many counters (series) ``dag`` has."""
        with self._lock:
            return len(self._totals_of.get(dag, ()))

    # -- read at scrape time ---------------------------------------------------------------

    def prefix_label(self, job: Job | None, prefix: str) -> str:
        """The ``prefix`` label of ``job``'s tasks of ``prefix``: itself, or ``other`` once
        the job has ``max_prefixes`` others."""
        with self._lock:
            return self._slot(job, prefix)

    def series(self) -> list[Activity]:
        """Every counter, for one scrape."""
        with self._lock:
            totals = list(self._totals.items())
        return [
            Activity(unit, "" if job is None else str(job.id), "" if dag is None else str(dag.id),
                     prefix, activity, value)
            for (job, dag, prefix, activity, unit), value in totals
        ]

    def stats(self) -> dict[str, int]:
        """Sizes of the internal tables, to show that memory stays bounded."""
        return {"owned_pairs": len(self._owners), "dags": len(self._owned),
                "counters": len(self._totals), "jobs": len(self._prefixes)}

    # -- internals (under the lock) --------------------------------------------------------

    def _share(self, pair: Pair) -> list[tuple[Job | None, Dag | None, float]]:
        """Who gets what part of a (span, prefix)'s values: see the module's docstring."""
        shares = self._shares.get(pair)
        if shares is not None:
            return shares
        owners = self._owners.get(pair)
        if not owners:
            return [(None, None, 1.0)]  # not cached: an owner may come later
        by_job: dict[Job, list[Dag]] = {}
        tasks: dict[Job, int] = {}
        for dag, count in owners.items():
            by_job.setdefault(dag.job, []).append(dag)
            tasks[dag.job] = tasks.get(dag.job, 0) + count
        total = sum(tasks.values())
        shares = [
            (job, dags[0] if len(dags) == 1 else None,
             tasks[job] / total if total else 1.0 / len(by_job))
            for job, dags in by_job.items()
        ]
        self._shares[pair] = shares
        return shares

    def _slot(self, job: Job | None, prefix: str) -> str:
        slots = self._prefixes.setdefault(job, {})
        label = slots.get(prefix)
        if label is None:
            if len(slots) >= self.max_prefixes:
                return OTHER_PREFIX
            label = slots[prefix] = clean_label(prefix, self.label_max_length)
        return label

    def _name(self, activity: Hashable, unit: Hashable) -> tuple[str, str]:
        names = self._names.get((activity, unit))
        if names is None:
            if len(self._names) >= _NAMES_CACHE:
                self._names.clear()
            names = self._names[activity, unit] = (
                activity_label((activity,), self.label_max_length), safe_unit(str(unit)))
        return names

    def _count(self, total: Total, value: float) -> None:
        old = self._totals.get(total)
        if old is None:
            job, dag = total[0], total[1]
            self._totals_of.setdefault(dag if dag is not None else job, set()).add(total)
            if dag is not None and self._on_new_series is not None:
                self._on_new_series(dag)
            old = 0.0
        self._totals[total] = old + value
