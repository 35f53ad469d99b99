"""A deterministic Prometheus dataset for the collector tests, and the values the collector
must read back from it (computed here by plain formulas, independently of the collector).

Three windows, relative to T0 (a whole hour about six hours ago, so that durations back
from now reach it and it is inside Prometheus' retention):

- LONG [T0, T0+12000 s]: worker ``w-long``, one GPU, every metric every second: 12,001
  points per series, over query_range's 11,000-point limit, 108k samples in all.
- CORE [C, C+600 s], C = T0+13000: ``w-a`` (2 GPUs, every 5 s, restarted: no sample in
  (295, 420), a new instance label and an energy counter reset after), ``w-b`` (1 simulated
  GPU, every 5 s at +2.5 s, only memory and utilisation), and the scheduler (every 10 s:
  cluster-wide job/DAG, per-worker tasks, worker addresses, a monitor session from C+50 to
  C+550, four DAGs of three jobs with names and outcomes).
- MANY [M, M+60 s], M = T0+14000: workers m-0 … m-49, 2 GPUs each, every 15 s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from tests.prometheus_helpers import OpenMetrics

GiB = 2**30
MiB = 2**20
TOTAL = 16 * GiB
LONG_END = 12000
CORE_OFFSET = 13000
MANY_OFFSET = 14000
MANY_WORKERS = 50
RESTART = (295, 420)  # w-a's last sample before its restart, and its first after
SIMULATED = ("w-b",)  # its sidecar serves simulated GPUs (dask_gpu_info simulated="true")

METRICS = {  # column -> series
    "total-mem": "dask_gpu_memory_used_bytes",
    "mem-util": "dask_gpu_memory_used_bytes",
    "compute-util": "dask_gpu_utilization_ratio",
    "peak-mem": "dask_gpu_memory_peak_bytes",
    "mem-bw-util": "dask_gpu_memory_bandwidth_utilization_ratio",
    "power": "dask_gpu_power_watts",
    "temperature": "dask_gpu_temperature_celsius",
    "sm-clock": "dask_gpu_sm_clock_hertz",
    "energy": "dask_gpu_energy_joules_total",
}
COLUMNS = list(METRICS)


def a_times() -> list[float]:
    return [float(t) for t in range(0, 601, 5) if t <= RESTART[0] or t >= RESTART[1]]


def b_times() -> list[float]:
    return [t + 2.5 for t in range(0, 600, 5)]


def scheduler_times() -> list[float]:
    return [float(t) for t in range(0, 601, 10)]


def cluster_state(s: float) -> tuple[str, str]:
    """current_job/current_dag at scheduler scrape s (seconds after C)."""
    if s < 100 or s >= 500:
        return "", ""
    if s < 250:
        return "0", "0"
    return ("0", "1") if s < 400 else ("1", "0")


def worker_tasks(worker: str, s: float) -> list[tuple[str, str]]:
    """The (job, dag) pairs with tasks on ``worker`` at scheduler scrape s."""
    if worker == "w-a":
        if 100 <= s < 250:
            return [("0", "0")]
        if 250 <= s < 300:
            return [("0", "1"), ("0", "0")]
        return [("1", "0")] if 420 <= s < 500 else []
    if worker == "w-b":
        return [("0", "1")] if 250 <= s < 400 else []
    return []


# The CORE scheduler's DAGs: (job, dag) -> (job_name, client, first scrape that shows it,
# first running, first with its final status, that status); seen until the last scrape.
CORE_DAGS = {
    ("0", "0"): ("etl", "client-1", 90, 100, 250, 2),
    ("0", "1"): ("etl", "client-1", 240, 250, 400, 2),
    ("1", "0"): ("train", "client-1", 410, 420, 500, 3),
    ("2", "0"): ("etl", "client-2", 520, None, None, 0),  # another job of that name, waiting
}
STATUS_WORDS = {0: "waiting", 1: "running", 2: "finished", 3: "erred"}


def dag_status(dag: tuple[str, str], s: float) -> float:
    """dask_job_dag_status of a CORE DAG at scheduler scrape s (seen then)."""
    _, _, _, running, final, outcome = CORE_DAGS[dag]
    if final is not None and s >= final:
        return float(outcome)
    return 1.0 if running is not None and s >= running else 0.0


def expected_jobs() -> list[dict[str, str]]:
    """jobs.csv of the CORE window [C, C+600], seconds after C."""
    end = scheduler_times()[-1]
    return [{"job": job, "job_name": name, "dag": dag, "client": client,
             "status": STATUS_WORDS[outcome], "first_seen": f"{seen:.3f}",
             "last_seen": f"{final if final is not None else end:.3f}",
             "scheduler_start": ""}  # an older preload's series: no scheduler life
            for (job, dag), (name, client, seen, _, final, outcome) in sorted(CORE_DAGS.items())]


def as_of(t: float) -> float | None:
    """The last scheduler scrape at or before t (seconds after C)."""
    scrapes = [s for s in scheduler_times() if s <= t]
    return scrapes[-1] if scrapes else None


def expected_cluster(t: float) -> tuple[str, str]:
    s = as_of(t)
    return ("", "") if s is None else cluster_state(s)


def expected_worker(worker: str, t: float) -> tuple[str, str]:
    s = as_of(t)
    dags = worker_tasks(worker, s) if s is not None else []
    return min(dags, key=lambda d: (int(d[0]), int(d[1]))) if dags else ("", "")


def core_value(worker: str, metric: str, gpu: int, t: float) -> float | None:
    """The raw sample of a CORE series at t (seconds after C), None where there is none."""
    if worker == "w-b":
        values = {"dask_gpu_memory_used_bytes": 3 * GiB + t * MiB,
                  "dask_gpu_memory_total_bytes": TOTAL,
                  "dask_gpu_utilization_ratio": 0.5}
        return values.get(metric)
    used = (1 + gpu) * GiB + t * MiB
    if metric == "dask_gpu_memory_used_bytes":
        return used
    if metric == "dask_gpu_memory_total_bytes":
        return TOTAL
    if metric == "dask_gpu_utilization_ratio":
        return (t // 5 % 11) / 10
    if metric == "dask_gpu_memory_peak_bytes":
        spike = (260, 12 * GiB) if gpu == 0 else (450, 10 * GiB)
        return spike[1] if spike[0] <= t <= spike[0] + 25 else used + 256 * MiB
    if metric == "dask_gpu_memory_bandwidth_utilization_ratio":
        return (t // 5 % 4) / 8
    if metric == "dask_gpu_power_watts":
        if gpu == 1:
            return None  # this GPU does not report power: left out, not 0
        return math.nan if t == 50 else 100 + t / 10
    if metric == "dask_gpu_temperature_celsius":
        return 40 + gpu + t // 60
    if metric == "dask_gpu_sm_clock_hertz":
        return 1_410_000_000 + gpu * 15_000_000
    if metric == "dask_gpu_energy_joules_total":
        return t * 150 if t <= RESTART[0] else (t - RESTART[1]) * 150 + 5  # counter reset
    raise KeyError(metric)


def long_value(metric: str, t: int) -> float:
    """The LONG worker's sample at t (seconds after T0)."""
    return {"dask_gpu_memory_used_bytes": GiB + (t % 1000) * MiB,
            "dask_gpu_memory_total_bytes": TOTAL,
            "dask_gpu_utilization_ratio": (t % 100) / 100,
            "dask_gpu_memory_peak_bytes": GiB + (t % 1000) * MiB + MiB,
            "dask_gpu_memory_bandwidth_utilization_ratio": (t % 50) / 50,
            "dask_gpu_power_watts": 50 + t % 7,
            "dask_gpu_temperature_celsius": 30 + t % 5,
            "dask_gpu_sm_clock_hertz": 1_000_000_000 + (t % 3) * 1_000_000,
            "dask_gpu_energy_joules_total": t * 50}[metric]


def many_used(i: int, gpu: int, t: float) -> float:
    return (i + 1) * GiB + gpu * MiB + t


def column_value(column: str, raw: float | None, total: float | None) -> float | None:
    """What the CSV must hold for a raw sample, in the column's unit."""
    if raw is None:
        return None
    if column == "mem-util":
        return raw / total * 100
    if column in ("compute-util", "mem-bw-util"):
        return raw * 100
    if column == "sm-clock":
        return raw / 1e6
    return raw


@dataclass(frozen=True)
class Dataset:
    t0: int

    @property
    def core(self) -> int:
        return self.t0 + CORE_OFFSET

    @property
    def many(self) -> int:
        return self.t0 + MANY_OFFSET

    def openmetrics(self) -> OpenMetrics:
        om = OpenMetrics()
        self._long(om)
        self._core(om)
        self._many(om)
        return om

    def _info(self, om: OpenMetrics, worker: str, gpu: int, uuid: str, host: str,
              times: list[float]) -> None:
        om.add("dask_gpu_info", {"worker": worker, "gpu": str(gpu), "uuid": uuid,
                                 "hostname": host, "name": "Fake GPU",
                                 "simulated": "true" if worker in SIMULATED else "false",
                                 "pci_bus_id": f"0000:0{gpu}:00.0", "driver_version": "550.1",
                                 "instance": f"{host}:9446", "job": "dask-gpu"},
               [(t, 1.0) for t in times])

    def _long(self, om: OpenMetrics) -> None:
        labels = {"worker": "w-long", "gpu": "0", "uuid": "GPU-long0",
                  "instance": "long:9446", "job": "dask-gpu"}
        times = range(LONG_END + 1)
        self._info(om, "w-long", 0, "GPU-long0", "host-long", [self.t0 + t for t in times])
        for metric in {*METRICS.values(), "dask_gpu_memory_total_bytes"}:
            kind = "counter" if metric.endswith("_total") else "gauge"
            om.add(metric, labels, [(self.t0 + t, long_value(metric, t)) for t in times], kind)

    def _core(self, om: OpenMetrics) -> None:
        c = self.core
        metrics = [*dict.fromkeys(METRICS.values()), "dask_gpu_memory_total_bytes"]
        for worker, gpus, times in (("w-a", 2, a_times()), ("w-b", 1, b_times())):
            host = "host-a" if worker == "w-a" else "host-b"
            for gpu in range(gpus):
                uuid = f"GPU-{worker[-1]}{gpu}"
                self._info(om, worker, gpu, uuid, host, [c + t for t in times])
                for metric in metrics:
                    kind = "counter" if metric.endswith("_total") else "gauge"
                    for restarted in (False, True):  # a new instance after the restart
                        port = 9447 if restarted else 9446
                        labels = {"worker": worker, "gpu": str(gpu), "uuid": uuid,
                                  "instance": f"{host}:{port}", "job": "dask-gpu"}
                        part = [t for t in times if (t >= RESTART[1]) == restarted]
                        points = [(c + t, v) for t in part
                                  if (v := core_value(worker, metric, gpu, t)) is not None]
                        om.add(metric, labels, points, kind)
        sched = {"instance": "scheduler:8787", "job": "dask-scheduler"}
        times = scheduler_times()
        for name, index in (("dask_job_current_job", 0), ("dask_job_current_dag", 1)):
            om.add(name, sched, [(c + s, float(cluster_state(s)[index] or -1)) for s in times])
        for worker in ("w-a", "w-b"):
            dags = {d for s in times for d in worker_tasks(worker, s)}
            for job, dag in sorted(dags):
                count = 3.0 if worker == "w-a" and (job, dag) == ("0", "0") else 2.0
                om.add("dask_job_worker_tasks",
                       {**sched, "worker": worker, "job_id": job, "dag_id": dag},
                       [(c + s, count) for s in times if (job, dag) in worker_tasks(worker, s)])
        for worker, gpus in (("w-a", 2), ("w-b", 1)):
            for gpu in range(gpus):
                for address, part in self._addresses(worker, times):
                    om.add("dask_job_worker_gpu_info",
                           {**sched, "worker": worker, "address": address, "gpu": str(gpu),
                            "uuid": f"GPU-{worker[-1]}{gpu}"}, [(c + s, 1.0) for s in part])
        for (job, dag), (name, client, seen, *_) in CORE_DAGS.items():
            ids = {**sched, "job_id": job, "dag_id": dag}
            shown = [s for s in times if s >= seen]
            om.add("dask_job_dag_info", {**ids, "job_name": name, "client": client},
                   [(c + s, 1.0) for s in shown])
            om.add("dask_job_dag_status", ids, [(c + s, dag_status((job, dag), s)) for s in shown])
        om.add("dask_job_monitor_start_timestamp_seconds", sched,
               [(c + s, float(c + 50) if s >= 50 else 0.0) for s in times])
        om.add("dask_job_monitor_stop_timestamp_seconds", sched,
               [(c + s, float(c + 550) if s >= 550 else 0.0) for s in times])

    @staticmethod
    def _addresses(worker: str, times: list[float]) -> list[tuple[str, list[float]]]:
        if worker == "w-b":
            return [("tcp://10.0.0.2:40000", times)]
        return [("tcp://10.0.0.1:40000", [s for s in times if s < 300]),
                ("tcp://10.0.0.1:40001", [s for s in times if s >= RESTART[1]])]

    def _many(self, om: OpenMetrics) -> None:
        times = [float(t) for t in range(0, 61, 15)]
        for i in range(MANY_WORKERS):
            for gpu in range(2):
                uuid = f"GPU-m{i}-{gpu}"
                labels = {"worker": f"m-{i}", "gpu": str(gpu), "uuid": uuid,
                          "instance": f"m{i}:9446", "job": "dask-gpu"}
                self._info(om, f"m-{i}", gpu, uuid, f"host-m{i}", [self.many + t for t in times])
                om.add("dask_gpu_memory_used_bytes", labels,
                       [(self.many + t, many_used(i, gpu, t)) for t in times])
                om.add("dask_gpu_memory_total_bytes", labels,
                       [(self.many + t, float(TOTAL)) for t in times])


def make_dataset() -> Dataset:
    """T0: a whole hour between 7 and 6 hours ago."""
    return Dataset((int(time.time()) - 6 * 3600) // 3600 * 3600)


# ---- many Dask clusters, one Prometheus -----------------------------------------------------
#
# Windows relative to B (a whole hour about five hours ago), each 300 s, every 5 s:
# - CLUSTERS [B, B+300]: clusters ml-a and ml-b, each with workers w-0 and w-1 (same names,
#   different GPUs), their own scheduler, monitor session and DAG outcomes.
# - UNLABELLED [B+1000, ...]: one worker w-0 and its scheduler without a dask_cluster label.
# - MIXED [B+2000, ...]: ml-a's w-0 and an unlabelled w-9.
# - HA [B+3000, ...]: cluster ml-ha's w-0 and scheduler scraped by two replicas
#   (prometheus_replica a and b): b 0.4 s later, its values 1 higher, and a down in (100, 160).
# - DC [B+4000, ...]: cluster ml-dc's w-0 with a user's replica label dc_replica (x, y) on
#   the same timestamps, y's values 1 higher.

CLUSTERS = ("ml-a", "ml-b")
SCOPE_WORKERS = ("w-0", "w-1")
UNLABELLED_OFFSET, MIXED_OFFSET, HA_OFFSET, DC_OFFSET = 1000, 2000, 3000, 4000
SCOPE_TIMES = [float(t) for t in range(0, 301, 5)]
HA_GAP = (100, 160)  # replica a has no sample strictly between these
SESSIONS = {"ml-a": (10, 290), "ml-b": (20, 280)}
OUTCOMES = {"ml-a": {("0", "0"): (150, 2.0), ("0", "1"): (200, 3.0)},
            "ml-b": {("0", "0"): (250, 3.0), ("1", "0"): (260, 2.0)}}
BUSY = {"ml-a": (50, 150), "ml-b": (150, 250)}  # job 0 DAG 0 runs on w-0


def scope_used(k: int, i: int, t: float) -> float:
    """Memory used by worker w-<i> of cluster CLUSTERS[k] (k=2: the unlabelled/HA/DC ones)."""
    return (2 + 3 * k + i) * GiB + t * MiB


def scope_peak(k: int, i: int, t: float) -> float:
    """The peak gauge: ml-a's w-0 starts with 15 GiB left from before the window (within the
    first 30 s) and spikes to 12 GiB at 100-125; ml-b's w-0 spikes to 9 GiB at 200-225."""
    if (k, i) == (0, 0):
        if t <= 25:
            return 15 * GiB
        if 100 <= t <= 125:
            return 12 * GiB
    if (k, i) == (1, 0) and 200 <= t <= 225:
        return 9 * GiB
    return scope_used(k, i, t) + 256 * MiB


def ha_times(replica: str) -> list[float]:
    if replica == "a":
        return [t for t in SCOPE_TIMES if not HA_GAP[0] < t < HA_GAP[1]]
    return [t + 0.4 for t in SCOPE_TIMES]


def ha_expected() -> list[tuple[float, float]]:
    """(time, used memory) the collector must read from the HA pair: a whole, b in a's gap
    only where no sample of a is within 2.5 s (half the 5 s interval)."""
    a = {t: scope_used(2, 0, t) for t in ha_times("a")}
    b = {t: scope_used(2, 0, t - 0.4) + 1 for t in ha_times("b")
         if all(abs(t - s) > 2.5 for s in a)}
    return sorted({**a, **b}.items())


@dataclass(frozen=True)
class ClusterDataset:
    base: int

    def openmetrics(self) -> OpenMetrics:
        om = OpenMetrics()
        for k, cluster in enumerate(CLUSTERS):
            self._cluster(om, self.base, k, {"dask_cluster": cluster}, SCOPE_WORKERS)
        self._cluster(om, self.base + UNLABELLED_OFFSET, 2, {}, ("w-0",))
        self._cluster(om, self.base + MIXED_OFFSET, 0, {"dask_cluster": "ml-a"}, ("w-0",))
        self._gpu(om, self.base + MIXED_OFFSET, 2, {}, "w-9", SCOPE_TIMES)
        for replica in ("a", "b"):
            extra = {"dask_cluster": "ml-ha", "prometheus_replica": replica}
            self._gpu(om, self.base + HA_OFFSET, 2, extra, "w-0", ha_times(replica),
                      shift=0.4 if replica == "b" else 0.0, plus=1.0 if replica == "b" else 0.0)
        for replica, plus in (("x", 0.0), ("y", 1.0)):
            self._gpu(om, self.base + DC_OFFSET, 2, {"dask_cluster": "ml-dc",
                                                     "dc_replica": replica}, "w-0",
                      SCOPE_TIMES, plus=plus)
        return om

    @staticmethod
    def _gpu(om: OpenMetrics, at: int, k: int, extra: dict[str, str], worker: str,
             times: list[float], shift: float = 0.0, plus: float = 0.0) -> None:
        i = int(worker[2:]) % 2
        name = extra.get("dask_cluster", "none")
        uuid = f"GPU-{name}-{worker}"
        labels = {"worker": worker, "gpu": "0", "uuid": uuid, "instance": f"{name}-{worker}:9446",
                  "job": "dask-gpu", **extra}
        om.add("dask_gpu_info", {**labels, "hostname": f"{name}-{worker}", "name": "Fake GPU"},
               [(at + t, 1.0) for t in times])
        om.add("dask_gpu_up", labels, [(at + t, 1.0) for t in times])
        om.add("dask_gpu_memory_used_bytes", labels,
               [(at + t, scope_used(k, i, t - shift) + plus) for t in times])
        om.add("dask_gpu_memory_peak_bytes", labels,
               [(at + t, scope_peak(k, i, t - shift) + plus) for t in times])
        om.add("dask_gpu_memory_total_bytes", labels, [(at + t, float(TOTAL)) for t in times])
        om.add("dask_gpu_utilization_ratio", labels, [(at + t, 0.1 * (k + 1)) for t in times])

    def _cluster(self, om: OpenMetrics, at: int, k: int, extra: dict[str, str],
                 workers: tuple[str, ...]) -> None:
        cluster = extra.get("dask_cluster", "ml-a" if k == 0 else "ml-b")
        for worker in workers:
            self._gpu(om, at, k, extra, worker, SCOPE_TIMES)
        sched = {"instance": f"{extra.get('dask_cluster', 'none')}-scheduler:8787",
                 "job": "dask-scheduler", **extra}
        lo, hi = BUSY.get(cluster, (50, 150))
        busy = [t for t in SCOPE_TIMES if lo <= t < hi]
        for name in ("dask_job_current_job", "dask_job_current_dag"):
            om.add(name, sched, [(at + t, 0.0 if t in busy else -1.0) for t in SCOPE_TIMES])
        om.add("dask_job_worker_tasks", {**sched, "worker": "w-0", "job_id": "0", "dag_id": "0"},
               [(at + t, 2.0) for t in busy])
        for i, worker in enumerate(workers):
            om.add("dask_job_worker_gpu_info",
                   {**sched, "worker": worker, "address": f"tcp://10.{k}.0.{i}:4000",
                    "gpu": "0", "uuid": f"GPU-{extra.get('dask_cluster', 'none')}-{worker}"},
                   [(at + t, 1.0) for t in SCOPE_TIMES])
        start, stop = SESSIONS.get(cluster, (10, 290))
        om.add("dask_job_monitor_start_timestamp_seconds", sched,
               [(at + t, float(at + start) if t >= start else 0.0) for t in SCOPE_TIMES])
        om.add("dask_job_monitor_stop_timestamp_seconds", sched,
               [(at + t, float(at + stop) if t >= stop else 0.0) for t in SCOPE_TIMES])
        for (job, dag), (done, status) in OUTCOMES.get(cluster, {}).items():
            om.add("dask_job_dag_status", {**sched, "job_id": job, "dag_id": dag},
                   [(at + t, status if t >= done else 1.0) for t in SCOPE_TIMES])


def make_cluster_dataset() -> ClusterDataset:
    """B: a whole hour between 6 and 5 hours ago."""
    return ClusterDataset((int(time.time()) - 5 * 3600) // 3600 * 3600)


# ---- where the time went --------------------------------------------------------------------
#
# Relative to W (a whole hour about four hours ago), 500 s; the export reads [W+100, W+400].
# Cluster "lab": GPU sidecars every 5 s at 0, 5, ...; its scheduler every 5 s one second
# earlier (4, 9, ...), so a GPU sample at t takes the scheduler's scrape at t-1.
# - g-0 (1 GPU): utilisation 0.8 in [150, 250), else 0 (the busy counter is its integral);
#   100 W, its energy counter reset at 200 (after: 500 + 100 (t - 200));
#   memory used 5 GiB at 155..245, else 1 GiB.
# - g-1 (1 GPU, no energy counter): utilisation 0.5 in [200, 300); 2 GiB used.
# - what executed (dask_job_worker_prefix_tasks, at scheduler scrapes s):
#   g-0: load (job 0 DAG 0, 1 task) for s in [100, 150); train (job 0 DAG 0, 2 tasks) for s
#   in [150, 250); prep (job 1 DAG 0, 2 tasks) for s in [200, 250). g-1: fit (job 1 DAG 0,
#   1 task) for s in [200, 300).
# - activities: job 0 DAG 0 train thread-cpu seconds = s (there before the range);
#   job 1 DAG "" prep disk-read seconds: born at 204 at 5, + s/10, the scheduler restarted
#   at 304 (from 1 again); job 0 DAG 0 train memory-read bytes: 1000, never growing.
#   Scraped by two HA replicas (prometheus_replica a and b), same values.
# - worker resources of g-0: memory 2 GiB + s MiB, spilled s KiB, cpu 1.5 cores, executing
#   = what executed.
# Cluster "other": a g-0 of its own, busy all the time, running train of its job 0 DAG 0,
# with far bigger activity counters: none of it may show in lab's files.

LAB_RANGE = (100, 400)
LAB_TIMES = [float(t) for t in range(0, 501, 5)]


def lab_scrapes() -> list[float]:
    return [t + 4 for t in range(0, 500, 5)]


def lab_busy(worker: str, t: float) -> float:
    lo, hi, util = (150, 250, 0.8) if worker == "g-0" else (200, 300, 0.5)
    return util * max(0.0, min(t, hi) - lo)


def lab_tasks(s: float) -> list[tuple[str, str, str, str, float]]:
    """(worker, job, dag, prefix, tasks) executing at scheduler scrape s."""
    out = []
    if 100 <= s < 150:
        out.append(("g-0", "0", "0", "load", 1.0))
    if 150 <= s < 250:
        out.append(("g-0", "0", "0", "train", 2.0))
    if 200 <= s < 250:
        out.append(("g-0", "1", "0", "prep", 2.0))
    if 200 <= s < 300:
        out.append(("g-1", "1", "0", "fit", 1.0))
    return out


def lab_prep(s: float) -> float:
    return 5 + (s - 204) / 10 if s < 304 else 1 + (s - 304) / 10


# The files the collector must write for [W+100, W+400], worked out by hand from the above:
# g-0's busy intervals (t-5, t] for t = 155..250 give 4 s each: 155..200 to train alone
# (40 s), 205..250 half to train, half to prep (20 s each); each interval is 500 J (the reset
# at 200 counts from 0); load ran while the GPU idled (0 s, yet 10 intervals of 500 J).
# g-1: fit gets 2.5 s for t = 205..300 (50 s), no energy. Activities: train 399 - 99 = 300 s;
# prep 14.5 before the restart + 10.5 after = 25 s.
LAB_GPU_BY_PREFIX = [
    ("0", "etl", "0", "load", 0.0, 1 * GiB, 5000.0, ""),
    ("0", "etl", "0", "train", 60.0, 5 * GiB, 7500.0, ""),
    ("1", "fit-job", "0", "fit", 50.0, 2 * GiB, None, ""),
    ("1", "fit-job", "0", "prep", 20.0, 5 * GiB, 2500.0, ""),
]  # scheduler_start "": the dataset's scheduler series are an older preload's
LAB_ACTIVITIES = [
    ("0", "etl", "0", "train", "thread-cpu", "seconds", 300.0, ""),
    ("1", "fit-job", "", "prep", "disk-read", "seconds", 25.0, ""),
]


@dataclass(frozen=True)
class LabDataset:
    base: int

    def openmetrics(self) -> OpenMetrics:
        om = OpenMetrics()
        w = self.base
        for cluster in ("lab", "other"):
            workers = ("g-0", "g-1") if cluster == "lab" else ("g-0",)
            for worker in workers:
                self._gpu(om, cluster, worker)
            sched = {"instance": f"{cluster}-scheduler:8787", "job": "dask-scheduler",
                     "dask_cluster": cluster}
            for name in ("dask_job_current_job", "dask_job_current_dag"):
                om.add(name, sched, [(w + s, 0.0) for s in lab_scrapes()])
            for worker in workers:
                om.add("dask_job_worker_gpu_info", {**sched, "worker": worker, "gpu": "0",
                                                    "address": f"tcp://{worker}:1",
                                                    "uuid": f"GPU-{cluster}-{worker}"},
                       [(w + s, 1.0) for s in lab_scrapes()])
            if cluster == "other":
                om.add("dask_job_worker_prefix_tasks", {**sched, "worker": "g-0", "job_id": "0",
                                                        "dag_id": "0", "prefix": "train"},
                       [(w + s, 4.0) for s in lab_scrapes()])
                om.add("dask_job_activity_seconds_total",
                       {**sched, "job_id": "0", "dag_id": "0", "prefix": "train",
                        "activity": "thread-cpu"},
                       [(w + s, 1000.0 * s) for s in lab_scrapes()], "counter")
                continue
            keys = {(wk, j, d, p) for s in lab_scrapes() for wk, j, d, p, _ in lab_tasks(s)}
            for worker, job, dag, prefix in sorted(keys):
                om.add("dask_job_worker_prefix_tasks",
                       {**sched, "worker": worker, "job_id": job, "dag_id": dag,
                        "prefix": prefix},
                       [(w + s, n) for s in lab_scrapes() for wk, j, d, p, n in lab_tasks(s)
                        if (wk, j, d, p) == (worker, job, dag, prefix)])
            for job, name in (("0", "etl"), ("1", "fit-job")):  # running all along
                om.add("dask_job_dag_info", {**sched, "job_id": job, "dag_id": "0",
                                             "job_name": name, "client": "c"},
                       [(w + s, 1.0) for s in lab_scrapes()])
                om.add("dask_job_dag_status", {**sched, "job_id": job, "dag_id": "0"},
                       [(w + s, 1.0) for s in lab_scrapes()])
            self._resources(om, sched)
            for replica in ("a", "b"):
                self._activities(om, {**sched, "prometheus_replica": replica})
        return om

    def _gpu(self, om: OpenMetrics, cluster: str, worker: str) -> None:
        w = self.base
        labels = {"worker": worker, "gpu": "0", "uuid": f"GPU-{cluster}-{worker}",
                  "instance": f"{cluster}-{worker}:9446", "job": "dask-gpu",
                  "dask_cluster": cluster}
        om.add("dask_gpu_info", {**labels, "hostname": worker, "name": "Fake GPU"},
               [(w + t, 1.0) for t in LAB_TIMES])
        busy = (lambda t: t) if cluster == "other" else (lambda t: lab_busy(worker, t))
        om.add("dask_gpu_busy_seconds_total", labels,
               [(w + t, busy(t)) for t in LAB_TIMES], "counter")
        used = 2 * GiB if worker == "g-1" else 1 * GiB
        om.add("dask_gpu_memory_used_bytes", labels,
               [(w + t, 5 * GiB if worker == "g-0" and 155 <= t <= 245 else used)
                for t in LAB_TIMES])
        om.add("dask_gpu_memory_total_bytes", labels, [(w + t, float(TOTAL)) for t in LAB_TIMES])
        if cluster == "lab" and worker == "g-0":  # a Hopper GPU: GPM activity
            om.add("dask_gpu_sm_active_ratio", labels, [(w + t, 0.25) for t in LAB_TIMES])
        if worker == "g-0":
            om.add("dask_gpu_energy_joules_total", labels,
                   [(w + t, 1000 + 100 * t if t < 200 else 500 + 100 * (t - 200))
                    for t in LAB_TIMES], "counter")

    def _resources(self, om: OpenMetrics, sched: dict[str, str]) -> None:
        w, labels = self.base, {**sched, "worker": "g-0"}
        om.add("dask_job_worker_memory_bytes", labels,
               [(w + s, 2 * GiB + s * MiB) for s in lab_scrapes()])
        om.add("dask_job_worker_spilled_bytes", labels,
               [(w + s, s * 1024) for s in lab_scrapes()])
        om.add("dask_job_worker_cpu_ratio", labels, [(w + s, 1.5) for s in lab_scrapes()])
        om.add("dask_job_worker_rmm_used_bytes", labels,
               [(w + s, GiB + s * MiB) for s in lab_scrapes()])
        om.add("dask_job_worker_rmm_pool_bytes", labels,
               [(w + s, 16.0 * GiB) for s in lab_scrapes()])
        om.add("dask_job_worker_executing_tasks", labels,
               [(w + s, sum(n for wk, *_, n in lab_tasks(s) if wk == "g-0"))
                for s in lab_scrapes()])

    def _activities(self, om: OpenMetrics, sched: dict[str, str]) -> None:
        w = self.base
        train = {**sched, "job_id": "0", "dag_id": "0", "prefix": "train"}
        om.add("dask_job_activity_seconds_total", {**train, "activity": "thread-cpu"},
               [(w + s, s) for s in lab_scrapes()], "counter")
        om.add("dask_job_activity_bytes_total", {**train, "activity": "memory-read"},
               [(w + s, 1000.0) for s in lab_scrapes()], "counter")
        om.add("dask_job_activity_seconds_total",
               {**sched, "job_id": "1", "dag_id": "", "prefix": "prep", "activity": "disk-read"},
               [(w + s, lab_prep(s)) for s in lab_scrapes() if s >= 204], "counter")


def make_lab_dataset() -> LabDataset:
    """W: a whole hour between 4 and 3 hours ago."""
    return LabDataset((int(time.time()) - 4 * 3600) // 3600 * 3600)
