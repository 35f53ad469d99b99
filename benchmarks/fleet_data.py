"""A synthetic fleet as OpenMetrics text: every series the GPU exporter and the scheduler
preload write (their MetricSpecs in dask_metrics.contract), for ``promtool tsdb
create-blocks-from openmetrics``.

The fleet, deterministic: workers in groups of GROUP_SIZE, each group running jobs back to
back (JOB_SECONDS of three DAGs, then IDLE_SECONDS idle), the groups' schedules staggered;
a worker runs one task prefix at a time (PREFIX_SECONDS each) out of PREFIXES_PER_JOB, so
that every DAG counts every prefix; the GPUs busy while their worker runs a DAG. The
scheduler keeps a finished DAG's series DAG_TTL seconds after it ended (its default
``finished-dag-ttl``) and is scraped half an interval after the exporters, from SCHED_LEAD
before the data on. Left out: the series that only exist on faults (NVML errors, plugin
errors) and the byte-unit activity counters (the fleet does not spill).

Series at W workers x G GPUs: 27 G W per-GPU, 20 W per-worker, and per hour about W/50
groups x 5.5 jobs x 3 DAGs x (50 x 6 activity counters + 50 workers x 7 DAG series) plus
W x 90 short prefix-task series.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from dask_metrics import contract as c

VERSION = 2  # bump when the data changes: cached blocks are keyed by it
GROUP_SIZE = 50
JOB_SECONDS = 600
IDLE_SECONDS = 60
DAGS_PER_JOB = 3
PREFIXES_PER_JOB = 50
PREFIX_SECONDS = 40
DAG_TTL = 300
SCHED_LEAD = 300
ACTIVITIES = ("thread-cpu", "thread-noncpu", "executor", "other", "deserialize", "serialize")
CONTEXTS = ("gather-dep", "get-data", "memory-monitor")
CLUSTER = "fleet"
SCHEDULER_START = "1700000000"
THREADS = 2
GiB = 2**30

PERIOD = JOB_SECONDS + IDLE_SECONDS
DAG_SECONDS = JOB_SECONDS // DAGS_PER_JOB


def worker_name(w: int) -> str:
    """The ``worker`` label of the w-th worker."""
    return f"w-{w}"


def gpu_uuid(w: int, g: int) -> str:
    """The ``uuid`` label of the w-th worker's GPU g: random hex digits as NVML's, the same
    in every build."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{w}/{g}')}"


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class Schedule:
    """Who runs what when: pure functions of (worker, seconds into the data)."""

    def __init__(self, workers: int) -> None:
        self.groups = max(-(-workers // GROUP_SIZE), 1)
        self.offset = 10 * PERIOD  # job numbers never negative, even in the lead

    def job_at(self, group: int, s: float) -> tuple[int, int, float] | None:
        """(job id, DAG id, the DAG's start in seconds into the data) the group runs at
        ``s``, or None while it idles."""
        local = s + self.offset + group * PERIOD / self.groups
        k, phase = divmod(local, PERIOD)
        if phase >= JOB_SECONDS:
            return None
        dag = int(phase // DAG_SECONDS)
        return int(k) * self.groups + group, dag, s - (phase - dag * DAG_SECONDS)

    def dags(self, group: int, lo: float, hi: float) -> list[tuple[int, int, float]]:
        """Every (job, DAG, start) of ``group`` running somewhere in [lo, hi]."""
        found: dict[tuple[int, int], float] = {}
        s = lo
        while s <= hi:
            if (run := self.job_at(group, s)) is not None:
                found.setdefault(run[:2], run[2])
            s += DAG_SECONDS / 4
        return [(j, d, start) for (j, d), start in found.items()]

    @staticmethod
    def prefix(w: int, s: float, dag_start: float) -> str:
        return f"p{(w + int((s - dag_start) // PREFIX_SECONDS)) % PREFIXES_PER_JOB}"

    @staticmethod
    def utilisation(w: int, g: int) -> float:
        return 0.55 + 0.4 * ((w * 7 + g * 3) % 10) / 10


def write_fleet(path: Path, workers: int, gpus: int, t0: int, seconds: int,
                interval: int = 15) -> int:
    """Write the fleet's data (families together, each series' samples in time order);
    return the number of samples."""
    plan = Schedule(workers)
    gpu_times = range(0, seconds + 1, interval)
    lead = -(-SCHED_LEAD // interval) * interval
    sched_times = [s + interval / 2 for s in range(-lead, seconds + 1, interval)]
    gpu_stamps = [str(t0 + s) for s in gpu_times]
    exporter = {c.DASK_CLUSTER: CLUSTER, "job": "dask-gpu"}
    scheduler = {c.DASK_CLUSTER: CLUSTER, "instance": "scheduler:8787", "job": "dask-scheduler"}
    count = 0

    with open(path, "w", encoding="utf-8") as fh:

        def family(spec: c.MetricSpec) -> None:
            name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
            fh.write(f"# TYPE {name} {spec.type}\n")

        def series(name: str, labels: dict[str, str], points: Iterable[tuple[str, str]]) -> None:
            nonlocal count
            head = name + _labels(labels) + " "
            lines = [f"{head}{v} {t}\n" for t, v in points]
            count += len(lines)
            fh.write("".join(lines))

        def busy(w: int, s: float) -> bool:
            return plan.job_at(w // GROUP_SIZE, s) is not None

        # -- the GPU exporters: one per worker, every GPU of it
        per_gpu = {spec.name: spec for spec in c.GPU_SPECS if c.GPU in spec.labels}
        for name, spec in per_gpu.items():
            family(spec)
            value = _gpu_value(name, gpu_times, interval, t0)
            for w in range(workers):
                on = [busy(w, s) for s in gpu_times]
                for g in range(gpus):
                    labels = {**exporter, "instance": f"node-{w}:9446",
                              c.WORKER: worker_name(w), c.GPU: str(g), c.UUID: gpu_uuid(w, g)}
                    if name == c.INFO.name:
                        labels |= {"name": "NVIDIA H100 80GB HBM3",
                                   "pci_bus_id": f"0000:{g:02x}:00.0",
                                   "driver_version": "550.54.15", "hostname": f"node-{w}",
                                   c.SIMULATED: "false"}
                    if name == c.PROCESS_MEMORY.name:
                        labels[c.PID] = str(1000 + w)
                    series(name, labels, zip(gpu_stamps, value(on, plan.utilisation(w, g)),
                                             strict=True))
        per_worker = [s for s in c.GPU_SPECS if c.GPU not in s.labels and "call" not in s.labels]
        for spec in per_worker:
            family(spec)
            value = _exporter_value(spec.name, gpu_times, interval, t0)
            for w in range(workers):
                labels = {**exporter, "instance": f"node-{w}:9446", c.WORKER: worker_name(w)}
                series(spec.name, labels, zip(gpu_stamps, value, strict=True))

        # -- the scheduler preload
        sched = [f"{t0 + s:.3f}" for s in sched_times]
        at = dict(zip(sched_times, sched, strict=True))
        started = {**scheduler, c.SCHEDULER_START: SCHEDULER_START}
        running = [[plan.job_at(g, s) for s in sched_times] for g in range(plan.groups)]
        dags = {(j, d): (g, start) for g in range(plan.groups)
                for j, d, start in plan.dags(g, sched_times[0], sched_times[-1])}

        kept_at: dict[float, list[float]] = {}

        def kept(start: float) -> list[float]:
            """The scrapes that export a DAG's series: from its start to DAG_TTL after."""
            if start not in kept_at:
                kept_at[start] = [s for s in sched_times
                                  if start <= s <= start + DAG_SECONDS + DAG_TTL]
            return kept_at[start]

        def oldest(i: int) -> tuple[int, int]:
            runs = [r[i] for r in running if r[i] is not None]
            first = min(runs, default=None)
            return (first[0], first[1]) if first else (c.IDLE, c.IDLE)

        for spec, index in ((c.CURRENT_JOB, 0), (c.CURRENT_DAG, 1)):
            family(spec)
            series(spec.name, started, ((t, str(oldest(i)[index])) for i, t in enumerate(sched)))

        def worker_runs(w: int) -> dict[tuple[int, int], list[int]]:
            """(job, DAG) -> the scrape indices at which worker ``w`` runs it."""
            out: dict[tuple[int, int], list[int]] = {}
            for i, run in enumerate(running[w // GROUP_SIZE]):
                if run is not None:
                    out.setdefault(run[:2], []).append(i)
            return out

        runs = [worker_runs(w) for w in range(workers)]
        family(c.WORKER_TASKS)
        for w in range(workers):
            for (j, d), idx in runs[w].items():
                series(c.WORKER_TASKS.name, _dag_labels(started, j, d, worker_name(w)),
                       ((sched[i], str(THREADS)) for i in idx))
        for spec in (c.WORKER_DAG_START, c.WORKER_DAG_END):
            family(spec)
            for w in range(workers):
                for (j, d) in runs[w]:
                    start = dags[(j, d)][1]
                    end = start + DAG_SECONDS
                    stamp = repr(float(t0 + (start if spec is c.WORKER_DAG_START else end)))
                    shown = [s for s in kept(start)
                             if spec is c.WORKER_DAG_START or s >= end]
                    series(spec.name, _dag_labels(started, j, d, worker_name(w)),
                           ((at[s], stamp) for s in shown))
        dag_specs: list[tuple[c.MetricSpec, Callable[[float, float], str | None]]] = [
            (c.DAG_INFO, lambda s, start: "1"),
            (c.DAG_STATUS, lambda s, start: str(int(
                c.DagStatus.RUNNING if s < start + DAG_SECONDS else c.DagStatus.FINISHED))),
            (c.DAG_SUBMITTED, lambda s, start: repr(float(t0 + start))),
            (c.DAG_STARTED, lambda s, start: repr(float(t0 + start))),
            (c.DAG_FINISHED, lambda s, start: repr(float(t0 + start + DAG_SECONDS))
             if s >= start + DAG_SECONDS else None),
        ]
        for spec, value in dag_specs:
            family(spec)
            for (j, d), (_, start) in sorted(dags.items()):
                labels = _dag_labels(started, j, d)
                if spec is c.DAG_INFO:
                    labels |= {c.JOB_NAME: f"train-{j % 7}", c.CLIENT: f"Client-{j:08x}"}
                points = ((at[s], v) for s in kept(start) if (v := value(s, start)) is not None)
                series(spec.name, labels, points)
        family(c.DAGS_COMPLETED)
        ends = sorted(start + DAG_SECONDS for _, start in dags.values())
        for status in ("finished", "erred"):
            series(c.DAGS_COMPLETED.name, {**scheduler, "status": status},
                   ((t, str(sum(e <= s for e in ends) if status == "finished" else 0))
                    for s, t in zip(sched_times, sched, strict=True)))
        for spec, value in ((c.DAGS_UNSCRAPED, "0"), (c.SCHEDULER_STARTED, SCHEDULER_START)):
            family(spec)
            series(spec.name, scheduler, ((t, value) for t in sched))
        session = (t0 + 0.25 * seconds, t0 + 0.75 * seconds)
        for spec, stamp in ((c.MONITOR_START, session[0]), (c.MONITOR_STOP, session[1])):
            family(spec)
            series(spec.name, started, ((t, repr(stamp)) for s, t in zip(sched_times, sched,
                                                                             strict=True)
                                        if t0 + s >= session[0]))
        family(c.WORKER_GPU_INFO)
        for w in range(workers):
            for g in range(gpus):
                address = f"tcp://10.0.{w // 250}.{w % 250}:40000"
                series(c.WORKER_GPU_INFO.name,
                       {**scheduler, c.WORKER: worker_name(w), c.ADDRESS: address,
                        c.GPU: str(g), c.UUID: gpu_uuid(w, g)}, ((t, "1") for t in sched))
        family(c.ACTIVITY_SECONDS)
        for (j, d), (group, start) in sorted(dags.items()):
            members = min(GROUP_SIZE, workers - group * GROUP_SIZE)
            rate = members * THREADS / PREFIXES_PER_JOB
            for p in range(PREFIXES_PER_JOB):
                for a, activity in enumerate(ACTIVITIES):
                    share = rate * (len(ACTIVITIES) - a) / 21
                    series(c.ACTIVITY_SECONDS.name,
                           _dag_labels(started, j, d) | {c.PREFIX: f"p{p}", c.ACTIVITY: activity},
                           ((at[s], repr(round(min(s - start, DAG_SECONDS) * share, 3)))
                            for s in kept(start)))
        family(c.CLUSTER_ACTIVITY_SECONDS)
        for context in CONTEXTS:
            for activity in ("network", "other"):
                series(c.CLUSTER_ACTIVITY_SECONDS.name,
                       {**scheduler, c.CONTEXT: context, c.ACTIVITY: activity},
                       ((t, repr(round((s + lead) * 0.01 * workers, 3)))
                        for s, t in zip(sched_times, sched, strict=True)))
        for spec in c.SCHEDULER_SPECS:
            if spec.labels == c.WORKER_LABELS:
                family(spec)
                for w in range(workers):
                    value = _worker_value(spec.name, w)
                    series(spec.name, {**scheduler, c.WORKER: worker_name(w)},
                           ((t, value(busy(w, s))) for s, t in zip(sched_times, sched,
                                                                    strict=True)))
        family(c.WORKER_PREFIX_TASKS)
        for w in range(workers):
            for (j, d), idx in runs[w].items():
                start = dags[(j, d)][1]
                by_prefix: dict[str, list[int]] = {}
                for i in idx:
                    by_prefix.setdefault(plan.prefix(w, sched_times[i], start), []).append(i)
                for prefix, points in by_prefix.items():
                    series(c.WORKER_PREFIX_TASKS.name,
                           _dag_labels(started, j, d, worker_name(w)) | {c.PREFIX: prefix},
                           ((sched[i], str(THREADS)) for i in points))
        fh.write("# EOF\n")
    return count


def _dag_labels(base: dict[str, str], job: int, dag: int, worker: str | None = None
                ) -> dict[str, str]:
    labels = dict(base)
    if worker is not None:
        labels[c.WORKER] = worker
    return labels | {c.JOB_ID: str(job), c.DAG_ID: str(dag)}


Values = Callable[[Sequence[bool], float], list[str]]


def _gpu_value(name: str, times: range, interval: int, t0: int) -> Values:
    """The samples of per-GPU series ``name`` from when its worker runs a DAG (``on``) and
    its GPU's utilisation while it does."""
    def gauge(busy_value: Callable[[float], float], idle: float) -> Values:
        return lambda on, u: [repr(busy_value(u)) if b else repr(idle) for b in on]

    def counter(per_second: Callable[[float], float], idle: float = 0.0) -> Values:
        def values(on: Sequence[bool], u: float) -> list[str]:
            total, out = 0.0, []
            for i, b in enumerate(on):
                if i:
                    total += interval * (per_second(u) if b else idle)
                out.append(repr(round(total, 3)))
            return out
        return values

    constant: dict[str, float] = {
        c.INFO.name: 1, c.UP.name: 1, c.MEMORY_TOTAL.name: 80 * GiB,
        c.MEMORY_PEAK_TIME.name: t0, c.MEMORY_NEXT_PEAK_TIME.name: t0,
    }
    if name in constant:
        value = repr(constant[name])
        return lambda on, u: [value] * len(on)
    table: dict[str, Values] = {
        c.MEMORY_USED.name: gauge(lambda u: round(u * 60 * GiB), 0.5 * GiB),
        c.MEMORY_RESERVED.name: gauge(lambda u: 0.5 * GiB, 0.5 * GiB),
        c.MEMORY_PEAK.name: gauge(lambda u: round(u * 64 * GiB), 0.5 * GiB),
        c.MEMORY_NEXT_PEAK.name: gauge(lambda u: round(u * 62 * GiB), 0.5 * GiB),
        c.UTILIZATION.name: gauge(lambda u: u, 0.0),
        c.BUSY.name: counter(lambda u: u),
        c.MEMORY_BANDWIDTH.name: gauge(lambda u: u / 2, 0.0),
        c.POWER.name: gauge(lambda u: 100 + 500 * u, 70.0),
        c.ENERGY.name: counter(lambda u: 100 + 500 * u, 70.0),
        c.TEMPERATURE.name: gauge(lambda u: 40 + 40 * u, 35.0),
        c.SM_CLOCK.name: gauge(lambda u: 1.98e9, 3.45e8),
        c.SM_ACTIVE_SECONDS.name: counter(lambda u: 0.8 * u),
        c.TENSOR_ACTIVE_SECONDS.name: counter(lambda u: 0.3 * u),
        c.PROCESS_MEMORY.name: gauge(lambda u: round(u * 58 * GiB), 0.0),
    }
    if name in table:
        return table[name]
    return gauge(lambda u: u * 0.7, 0.0)  # the GPM activity ratios


def _exporter_value(name: str, times: range, interval: int, t0: int) -> list[str]:
    """An exporter's own series (one per worker) at ``times``."""
    by_name: dict[str, Callable[[int], str]] = {
        c.EXPORTER_NVML_UP.name: lambda s: "1",
        c.EXPORTER_SAMPLES.name: lambda s: str(s),
        c.EXPORTER_SAMPLE_DURATION.name: lambda s: "0.004",
        c.EXPORTER_LAST_SAMPLE.name: lambda s: repr(float(t0 + s)),
        c.EXPORTER_PEAK_WINDOW.name: lambda s: "30",
        c.EXPORTER_SAMPLE_INTERVAL.name: lambda s: "1",
    }
    return [by_name[name](s) for s in times]


def _worker_value(name: str, w: int) -> Callable[[bool], str]:
    """A per-worker scheduler gauge from whether the worker runs a DAG."""
    limit = 256 * GiB
    table: dict[str, tuple[float, float]] = {  # busy, idle
        c.WORKER_MEMORY.name: (0.4 * limit, 0.05 * limit),
        c.WORKER_MANAGED_MEMORY.name: (0.3 * limit, 0.0),
        c.WORKER_SPILLED.name: (0.0, 0.0),
        c.WORKER_MEMORY_LIMIT.name: (limit, limit),
        c.WORKER_CPU.name: (1.6, 0.02),
        c.WORKER_THREADS.name: (THREADS, THREADS),
        c.WORKER_EXECUTING.name: (THREADS, 0),
        c.WORKER_PROCESSING.name: (8 + w % 5, 0),
        c.WORKER_OCCUPANCY.name: (12.5, 0.0),
        c.WORKER_STORED.name: (0.2 * limit, 0.0),
        c.WORKER_RMM_USED.name: (48 * GiB, 0.0),
        c.WORKER_RMM_POOL.name: (64 * GiB, 64 * GiB),
    }
    on, off = (repr(float(v)) for v in table[name])
    return lambda b: on if b else off
