"""A scripted session for the session report's tests, and the numbers its report
must show, worked out here by hand from the script (not by the collector's code).

Three Dask clusters in one Prometheus, samples every 5 s (GPUs and scheduler on the same
timestamps, so that each interval (t-5, t] belongs to the state scraped at t):

- ``rep`` [R, R+600]: ``w-0`` (2 x "NVIDIA A100-SXM4-80GB"; GPU 1 reports no power and no
  energy and is never busy) and ``w-1`` (1 x "Tesla T4", 16 GiB, leaves at R+300). Job 0
  "etl": DAG 0 on both workers [100, 200), DAG 1 on w-0 [200, 300), finished; job 1
  "train": DAG 0 on w-0 [350, 500), its GPU idle for the first 50 s, erred; task prefix
  "train" executing on w-0 [400, 500), activities of prefixes "load" and "train". Monitor
  session R+50 to R+550.
  w-0's GPU 0 has GPM counters: its SMs are active a quarter of its busy time, its tensor
  cores never; w-1 runs an RMM pool of 8 GiB, 2 GiB of it in use while it runs job 0.
- ``empty`` [R+1000, R+1300]: one worker, no job at all.
- ``sim`` [R+2000, R+2300]: one simulated GPU, no energy counter, job 0 "sim-job" [50, 150).
- ``again`` [R+3000, R+4200]: one A100 (100 W), two monitor sessions of one pipeline, before
  and after a change: [50, 550] runs "etl" [100, 200) at 10 GiB and "train" [250, 350);
  [650, 1150] runs "etl" [700, 820) at 12 GiB and "score" [900, 950) (``AGAIN_*``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import chain, pairwise

from tests.collector_dataset import GiB
from tests.prometheus_helpers import OpenMetrics

A100, T4 = "NVIDIA A100-SXM4-80GB", "Tesla T4"
EMPTY_OFFSET, SIM_OFFSET, AGAIN_OFFSET = 1000, 2000, 3000
STEP = 5
SESSION = (50, 550)
# (job, dag) -> (name, first scrape showing it, running from, final status at, status)
DAGS = {("0", "0"): ("etl", 95, 100, 200, 2.0), ("0", "1"): ("etl", 195, 200, 300, 2.0),
        ("1", "0"): ("train", 345, 350, 500, 3.0)}
RUNS = {"w-0": [(("0", "0"), 100, 200), (("0", "1"), 200, 300), (("1", "0"), 350, 500)],
        "w-1": [(("0", "0"), 100, 200)]}
LEAVES = {"w-0": 600, "w-1": 300}
# Dask's fine performance metrics: (job, dag, prefix, activity) -> (from, to, seconds in all)
ACTIVITIES = {("0", "0", "load", "thread-cpu"): (100, 200, 80.0),
              ("1", "0", "train", "thread-noncpu"): (350, 500, 40.0)}

# "again": (job, dag) -> as DAGS, with the peak memory while it runs
AGAIN_DAGS = {("0", "0"): ("etl", 95, 100, 200, 2.0, 10 * GiB),
              ("1", "0"): ("train", 245, 250, 350, 2.0, 4 * GiB),
              ("2", "0"): ("etl", 695, 700, 820, 2.0, 12 * GiB),
              ("3", "0"): ("score", 895, 900, 950, 2.0, 5 * GiB)}
AGAIN_SESSIONS = ((50, 550), (650, 1150))
AGAIN_WATTS = 100.0

SM_SHARE = 0.25  # w-0 GPU 0: SM activity / utilisation
RMM_POOL, RMM_USED = 8 * GiB, 2 * GiB  # w-1's pool, and its use while it runs job 0

# What the report must say, by hand: intervals of 5 s ending at t belong to the DAG at t.
EXPECTED_JOBS = {
    "0": {"job_name": "etl", "status": "finished", "wall_seconds": 205, "gpu_seconds": 500,
          "busy_seconds": 240, "mean_utilization_percent": 48.0, "idle_gpu_seconds": 200,
          "energy_joules": 47000, "peak_bytes": 30 * GiB, "peak_worker": "w-0",
          "peak_gpu": "0", "peak_at": 220,
          # w-0 GPU 0 busy 80 s + 60 s of its 200 s: SMs 0.25 x 140 / 200
          "mean_sm_active_percent": 17.5, "mean_tensor_active_percent": 0.0,
          "peak_rmm_used_bytes": RMM_USED, "rmm_pool_bytes": RMM_POOL,
          # w-1 held 2 GiB + (15 - 8) GiB; w-0's 30 GiB (no pool) is larger
          "peak_held_bytes": 30 * GiB},
    "1": {"job_name": "train", "status": "erred", "wall_seconds": 155, "gpu_seconds": 300,
          "busy_seconds": 100, "mean_utilization_percent": 33.33, "idle_gpu_seconds": 200,
          "energy_joules": 30000, "peak_bytes": 20 * GiB, "peak_worker": "w-0",
          "peak_gpu": "0", "peak_at": 450,
          "mean_sm_active_percent": 16.67, "mean_tensor_active_percent": 0.0,
          "peak_rmm_used_bytes": None, "rmm_pool_bytes": None, "peak_held_bytes": None},
}
EXPECTED_DAGS = {("0", "0"): {"wall_seconds": 105, "gpu_seconds": 300, "busy_seconds": 180,
                              "energy_joules": 27000, "peak_bytes": 15 * GiB},
                 ("0", "1"): {"wall_seconds": 105, "gpu_seconds": 200, "busy_seconds": 60,
                              "energy_joules": 20000, "peak_bytes": 30 * GiB},
                 ("1", "0"): {"wall_seconds": 155, "gpu_seconds": 300, "busy_seconds": 100,
                              "energy_joules": 30000, "peak_bytes": 20 * GiB}}


def dag_at(worker: str, t: float) -> tuple[str, str] | None:
    return next((dag for dag, lo, hi in RUNS.get(worker, ()) if lo <= t < hi), None)


def utilisation(worker: str, gpu: int, t: float) -> float:
    if worker == "w-1":
        return 1.0 if dag_at(worker, t) else 0.0
    if gpu == 1:
        return 0.0
    return {("0", "0"): 0.8, ("0", "1"): 0.6}.get(dag_at(worker, t) or ("", ""),
                                                 1.0 if 400 <= t < 500 else 0.0)


def peak(worker: str, gpu: int, t: float) -> float:
    """The peak gauge: 30 GiB at [220, 245] and 20 GiB at [450, 475] on w-0 GPU 0, 15 GiB
    at [150, 175] on w-1; used memory otherwise."""
    for who, g, lo, value in (("w-0", 0, 220, 30), ("w-0", 0, 450, 20), ("w-1", 0, 150, 15)):
        if (worker, gpu) == (who, g) and lo <= t <= lo + 25:
            return value * GiB
    return used(worker, gpu)


def used(worker: str, gpu: int) -> float:
    return {("w-0", 0): 10 * GiB, ("w-0", 1): 1 * GiB, ("w-1", 0): 4 * GiB}[(worker, gpu)]


@dataclass(frozen=True)
class ReportDataset:
    base: int

    def openmetrics(self) -> OpenMetrics:
        om = OpenMetrics()
        self._rep(om)
        self._empty(om)
        self._sim(om)
        self._again(om)
        return om

    @staticmethod
    def _gpu(om: OpenMetrics, cluster: str, worker: str, gpu: int, model: str, total: float,
             times: list[float], util: dict[float, float], peaks: dict[float, float],
             used_bytes: float, watts: float | None, simulated: bool = False,
             sm_share: float | None = None) -> None:
        labels = {"dask_cluster": cluster, "worker": worker, "gpu": str(gpu),
                  "uuid": f"GPU-{cluster}-{worker}-{gpu}", "instance": f"{worker}:9446",
                  "job": "dask-gpu"}
        om.add("dask_gpu_info", {**labels, "name": model, "hostname": f"host-{worker}",
                                 "simulated": "true" if simulated else "false"},
               [(t, 1.0) for t in times])
        om.add("dask_gpu_memory_total_bytes", labels, [(t, total) for t in times])
        om.add("dask_gpu_memory_used_bytes", labels, [(t, used_bytes) for t in times])
        om.add("dask_gpu_memory_peak_bytes", labels, [(t, peaks[t]) for t in times])
        om.add("dask_gpu_utilization_ratio", labels, [(t, util[t]) for t in times])
        busy = [0.0]
        for before, t in pairwise(times):
            busy.append(busy[-1] + util[t] * (t - before))
        om.add("dask_gpu_busy_seconds_total", labels, list(zip(times, busy, strict=True)),
               "counter")
        if sm_share is not None:  # GPM: SM activity a share of utilisation, no tensor work
            om.add("dask_gpu_sm_active_seconds_total", labels,
                   [(t, sm_share * b) for t, b in zip(times, busy, strict=True)], "counter")
            om.add("dask_gpu_tensor_active_seconds_total", labels, [(t, 0.0) for t in times],
                   "counter")
        if watts is not None:
            om.add("dask_gpu_power_watts", labels, [(t, watts) for t in times])
            om.add("dask_gpu_energy_joules_total", labels,
                   [(t, watts * (t - times[0])) for t in times], "counter")

    @staticmethod
    def _scheduler(om: OpenMetrics, cluster: str, at: int, times: list[float],
                   runs: dict[str, list[tuple[tuple[str, str], int, int]]],
                   dags: dict[tuple[str, str], tuple[str, int, int, int, float]],
                   sessions: tuple[tuple[int, int], ...]) -> None:
        sched = {"dask_cluster": cluster, "instance": f"{cluster}-scheduler:8787",
                 "job": "dask-scheduler"}
        for worker, spans in runs.items():
            for (job, dag), lo, hi in spans:
                om.add("dask_job_worker_tasks", {**sched, "worker": worker, "job_id": job,
                                                 "dag_id": dag},
                       [(at + t, 2.0) for t in times if lo <= t < hi])
        for (job, dag), (name, seen, running, final, status) in dags.items():
            ids = {**sched, "job_id": job, "dag_id": dag}
            shown = [t for t in times if t >= seen]
            om.add("dask_job_dag_info", {**ids, "job_name": name, "client": "client-1"},
                   [(at + t, 1.0) for t in shown])
            om.add("dask_job_dag_status", ids,
                   [(at + t, status if t >= final else 1.0 if t >= running else 0.0)
                    for t in shown])
        current = [min((d for d, lo, hi in chain.from_iterable(runs.values()) if lo <= t < hi),
                       default=None) for t in times]
        for name, i in (("dask_job_current_job", 0), ("dask_job_current_dag", 1)):
            om.add(name, sched, [(at + t, float(c[i]) if c else -1.0)
                                 for t, c in zip(times, current, strict=True)])
        # the last session started: its start, and its stop once it stopped (else 0)
        last = [max((s for s in sessions if s[0] <= t), default=None) for t in times]
        om.add("dask_job_monitor_start_timestamp_seconds", sched,
               [(at + t, float(at + s[0]) if s else 0.0) for t, s in zip(times, last,
                                                                         strict=True)])
        om.add("dask_job_monitor_stop_timestamp_seconds", sched,
               [(at + t, float(at + s[1]) if s and t >= s[1] else 0.0)
                for t, s in zip(times, last, strict=True)])

    def _rep(self, om: OpenMetrics) -> None:
        r = self.base
        for worker, gpus, model, total, watts in (("w-0", 2, A100, 80 * GiB, (200.0, None)),
                                                  ("w-1", 1, T4, 16 * GiB, (70.0,))):
            rel = [float(t) for t in range(0, LEAVES[worker] + 1, STEP)]
            for gpu in range(gpus):
                self._gpu(om, "rep", worker, gpu, model, total, [r + t for t in rel],
                          {r + t: utilisation(worker, gpu, t) for t in rel},
                          {r + t: peak(worker, gpu, t) for t in rel}, used(worker, gpu),
                          watts[gpu], sm_share=SM_SHARE if (worker, gpu) == ("w-0", 0) else None)
        times = [float(t) for t in range(0, 601, STEP)]
        self._scheduler(om, "rep", r, times, RUNS, DAGS, (SESSION,))
        sched = {"dask_cluster": "rep", "instance": "rep-scheduler:8787", "job": "dask-scheduler"}
        for (job, dag, prefix, activity), (lo, hi, total) in ACTIVITIES.items():
            om.add("dask_job_activity_seconds_total",
                   {**sched, "job_id": job, "dag_id": dag, "prefix": prefix,
                    "activity": activity},
                   [(r + t, total * min(max(t - lo, 0), hi - lo) / (hi - lo)) for t in times],
                   "counter")
        rmm = {**sched, "worker": "w-1"}
        om.add("dask_job_worker_rmm_pool_bytes", rmm, [(r + t, RMM_POOL) for t in times
                                                        if t <= LEAVES["w-1"]])
        om.add("dask_job_worker_rmm_used_bytes", rmm,
               [(r + t, RMM_USED if dag_at("w-1", t) else 0.5 * GiB) for t in times
                if t <= LEAVES["w-1"]])
        om.add("dask_job_worker_prefix_tasks", {**sched, "worker": "w-0", "job_id": "1",
                                                "dag_id": "0", "prefix": "train"},
               [(r + t, 1.0) for t in times if 400 <= t < 500])

    def _empty(self, om: OpenMetrics) -> None:
        at = self.base + EMPTY_OFFSET
        times = [at + float(t) for t in range(0, 301, STEP)]
        self._gpu(om, "empty", "w-e", 0, A100, 80 * GiB, times, dict.fromkeys(times, 0.0),
                  dict.fromkeys(times, 2 * GiB), 2 * GiB, 150.0)
        self._scheduler(om, "empty", at, [t - at for t in times], {}, {}, ((10, 290),))

    def _sim(self, om: OpenMetrics) -> None:
        at = self.base + SIM_OFFSET
        rel = [float(t) for t in range(0, 301, STEP)]
        runs = {"w-s": [(("0", "0"), 50, 150)]}
        self._gpu(om, "sim", "w-s", 0, "Simulated GPU", 4 * GiB, [at + t for t in rel],
                  {at + t: 0.5 if 50 <= t < 150 else 0.0 for t in rel},
                  dict.fromkeys([at + t for t in rel], 1 * GiB), 1 * GiB, None,
                  simulated=True)
        self._scheduler(om, "sim", at, rel, runs, {("0", "0"): ("sim-job", 45, 50, 150, 2.0)},
                        ((10, 290),))

    def _again(self, om: OpenMetrics) -> None:
        at = self.base + AGAIN_OFFSET
        rel = [float(t) for t in range(0, 1201, STEP)]
        spans = [(dag, running, final) for dag, (_, _, running, final, _, _)
                 in AGAIN_DAGS.items()]

        def running(t: float) -> tuple[str, str] | None:
            return next((d for d, lo, hi in spans if lo <= t < hi), None)

        self._gpu(om, "again", "w-a", 0, A100, 80 * GiB, [at + t for t in rel],
                  {at + t: 0.5 if running(t) else 0.0 for t in rel},
                  {at + t: AGAIN_DAGS[d][5] if (d := running(t)) else 1 * GiB for t in rel},
                  1 * GiB, AGAIN_WATTS)
        self._scheduler(om, "again", at, rel, {"w-a": spans},
                        {d: v[:5] for d, v in AGAIN_DAGS.items()}, AGAIN_SESSIONS)


def make_report_dataset() -> ReportDataset:
    """R: a whole hour between 4 and 3 hours ago."""
    return ReportDataset((int(time.time()) - 4 * 3600) // 3600 * 3600)
