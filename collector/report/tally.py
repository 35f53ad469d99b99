"""The report's numbers folded a worker at a time (pure): what ``model.build`` needs of
every worker, in memory that follows the jobs and DAGs, not the GPUs times the DAGs.

A fleet's day is thousands of jobs on thousands of GPUs: a list of every GPU of every job
(its use, its peak, per DAG too) would be most of the report's memory and of report.json.
Each job and DAG keeps its sums (``UseSum``: every GPU counted, a shared GPU once) and
lists ``LISTED`` GPUs: the highest peaks and the idlest GPUs, with how many it leaves out.
A GPU's whole-session figures are reduced likewise (``advice.GpuSummary``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dask_metrics.collector.attribution.usage import IDLE_PERCENT, Usage, UsageKey
from dask_metrics.collector.model.lifetimes import plain
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.report.advice import GpuSummary
from dask_metrics.collector.report.figures import (
    UseSum,
    device_key,
    held_bytes,
    num,
    peak_entry,
    shared_devices,
    use_entry,
)
from dask_metrics.collector.report.listed import LISTED, Listed

DAG_SEPARATOR = "/"  # job "3", DAG "1" -> "3/1": gpu_peaks grouped by DAG


@dataclass
class WorkerFacts:
    """What the report takes of one worker: a few numbers per GPU and job, not samples."""

    info: WorkerInfo
    usage: dict[UsageKey, Usage]
    job_peaks: list[Peak]
    dag_peaks: list[Peak]
    gpu_peaks: list[Peak]
    metered: frozenset[tuple[str, str]] = frozenset()  # (gpu, uuid) with an energy counter


def peak_rank(p: Peak) -> tuple[float]:
    return (p.peak_bytes if not math.isnan(p.peak_bytes) else 0.0,)


def idle_rank(entry: Mapping[str, Any]) -> tuple[float]:
    """The idlest GPU first: the lowest mean utilisation (none measured: last)."""
    mean = entry["mean_utilization_percent"]
    return (-math.inf if mean is None else -mean,)


def is_idle(entry: Mapping[str, Any], idle_percent: float = IDLE_PERCENT) -> bool:
    mean = entry["mean_utilization_percent"]
    return bool(entry["gpu_seconds"]) and mean is not None and mean < idle_percent


@dataclass
class DagTally:
    """A DAG's figures over every GPU it used, and the GPUs' peaks worth listing."""

    use: UseSum
    peaks: Listed[Peak] = field(default_factory=Listed)


@dataclass
class JobTally(DagTally):
    """A job's, with the idlest GPUs' own figures and what its GPUs held of an RMM pool."""

    per_gpu: Listed[dict[str, Any]] = field(default_factory=Listed)
    idle_gpus: int = 0
    held: float | None = None  # the largest of held_bytes' over the job's GPUs
    held_known: bool = False
    pending: dict[str, UseSum] = field(default_factory=dict)  # shared GPUs' views, by device

    def offer(self, entry: dict[str, Any]) -> None:
        """One GPU's own figures to the idlest listed, and to the idle count."""
        self.per_gpu.offer(idle_rank(entry), entry)
        self.idle_gpus += is_idle(entry)

    def settle(self) -> None:
        """Offer each GPU that several workers see once, as the largest of their views
        (under the first worker's name; its entry's ``shared_gpus`` names them all)."""
        for found in self.pending.values():
            worker, gpu, uuid = min(found.views)
            self.offer({"worker": worker, "gpu": gpu, "uuid": uuid, **found.entry()})
        self.pending.clear()


class Tally:
    """Every worker's WorkerFacts, folded as they come (``add``); ``shared``: the device keys
    of the GPUs that several workers see (figures.shared_devices of the export's
    inventory), kept apart until each is counted once."""

    def __init__(self, shared: frozenset[str] = frozenset(), most: int = LISTED) -> None:
        self.shared, self.most = shared, most
        self.workers: list[tuple[WorkerInfo, dict[tuple[str, str], float | None]]] = []
        self.use = UseSum(shared)
        self.jobs: dict[str, JobTally] = {}
        self.dags: dict[tuple[str, str], DagTally] = {}
        self.gpus = GpuSummary(most)
        self.pooled: list[str] = []  # workers with an RMM pool
        self.tracked: set[str] = set()  # workers whose pools track allocations
        self._counted: set[str] = set()  # shared devices already in ``gpus``

    @classmethod
    def of(cls, facts: Iterable[WorkerFacts], most: int = LISTED) -> Tally:
        facts = list(facts)
        tally = cls(shared_devices([(f.info.name, *g) for f in facts for g in f.info.gpus] +
                                   [(f.info.name, k[2], k[3]) for f in facts for k in f.usage]),
                    most)
        for f in facts:
            tally.add(f)
        return tally

    def _job(self, job: str) -> JobTally:
        if job not in self.jobs:
            self.jobs[job] = JobTally(UseSum(self.shared), Listed(self.most),
                                      Listed(self.most))
        return self.jobs[job]

    def _dag(self, job: str, dag: str) -> DagTally:
        self._job(job)
        if (job, dag) not in self.dags:
            self.dags[job, dag] = DagTally(UseSum(self.shared), Listed(self.most))
        return self.dags[job, dag]

    def add(self, f: WorkerFacts) -> None:
        name = f.info.name
        tracked = any(u.rmm_used for u in f.usage.values())
        if tracked:
            self.tracked.add(name)
        if any(u.rmm_pool for u in f.usage.values()):
            self.pooled.append(name)
        self.workers.append((f.info, {(p.gpu, p.uuid): p.total_bytes for p in f.gpu_peaks}))
        metered = frozenset((name, *g) for g in f.metered)
        mine = frozenset([name] if tracked else [])
        per_device: dict[tuple[str, str], Usage] = {}
        per_job: dict[str, dict[tuple[str, str], Usage]] = {}
        for (job, dag, gpu, uuid), u in f.usage.items():
            per_device.setdefault((gpu, uuid), Usage()).add(u)
            if job:
                key = (name, gpu, uuid)
                self._dag(job, dag).use.add(key, u, key in metered, tracked)
                per_job.setdefault(job, {}).setdefault((gpu, uuid), Usage()).add(u)
        for job, gpus in per_job.items():
            tally = self._job(job)
            for (gpu, uuid), u in gpus.items():
                key = (name, gpu, uuid)
                tally.use.add(key, u, key in metered, tracked)
                device = device_key(*key)
                if device in self.shared:
                    tally.pending.setdefault(device, UseSum(self.shared)).add(
                        key, u, key in metered, tracked)
                else:
                    tally.offer({"worker": name, "gpu": gpu, "uuid": uuid,
                                 **use_entry({key: u}, metered, mine)})
        for p in f.job_peaks:
            tally = self._job(p.job)
            tally.peaks.offer(peak_rank(p), p)
            if math.isnan(p.peak_bytes):
                continue
            u = per_job.get(p.job, {}).get((p.gpu, p.uuid), Usage())
            held, known = held_bytes(p.peak_bytes, u.rmm_used, u.rmm_pool, tracked)
            tally.held = held if tally.held is None else max(tally.held, held)
            tally.held_known |= known
        for p in f.dag_peaks:
            self._dag(p.job.split(DAG_SEPARATOR)[0], p.dag).peaks.offer(peak_rank(p), p)
        for (gpu, uuid), u in per_device.items():
            key = (name, gpu, uuid)
            self.use.add(key, u, key in metered, tracked)
        for p in f.gpu_peaks:
            device = device_key(name, p.gpu, p.uuid)
            if device in self.shared:  # one GPU is one GPU: the first worker's view
                if device in self._counted:
                    continue
                self._counted.add(device)
            whole = per_device.get((p.gpu, p.uuid), Usage())
            self.gpus.add({**peak_entry(p), "gpu_seconds": num(whole.seconds),
                           "mean_utilization_percent":
                           num(whole.busy / whole.seconds * 100, 2) if whole.seconds else None,
                           "job": plain(p.job) or None, "job_label": plain(p.job)})


def listed(found: Listed[Peak]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A job's or DAG's listed peaks as report.json writes them, and the highest of them (the
    highest of all: it is listed)."""
    peaks = [peak_entry(p) for p in found]
    return peaks, max(peaks, key=lambda p: p["peak_bytes"] or 0, default=None)
