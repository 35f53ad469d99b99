"""Recommendations of the session report (pure): what to ask for next time, each with the
number it is based on. The GPU models come from gpu_models.csv, the MIG slices from
mig_profiles.csv (``mig``), shipped with the package."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dask_metrics.collector.report.listed import LISTED, Listed
from dask_metrics.collector.report.mig import mig_gpu, shipped_mig, slice_bytes, smallest_slices

GIB = 2**30
DEFAULT_HEADROOM = 1.2
MOST_HEADROOM = 100.0  # a hundredfold peak is no advice about any GPU
NEAR_CAPACITY_PERCENT = 90.0
DEVICE_MEMORY_LIMIT_SHARE = 0.8  # of capacity: where dask-cuda should start spilling
SHARE_BELOW_PERCENT = 50.0  # GPUs busier than this on average are not shared further
POOL_ROUNDING = 256 * 2**20  # RMM pool sizes are rounded up to this
BUSY_PERCENT = 50.0  # NVML utilisation at or above which a GPU counts as "busy" ...
WAITING_SHARE = 0.5  # ... and as mostly waiting when fewer SMs than this share of it worked
TENSOR_IDLE_PERCENT = 1.0  # tensor activity below this is "idle" ...
TENSOR_WORTH_PERCENT = 20.0  # ... worth a word when at least this share of SMs was active
POOL_OVERSIZED = 2.0  # an RMM pool this many times the peak in use x headroom is too big


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_bytes: int


@dataclass
class GpuSummary:
    """What the advice reads of every GPU's whole-session figures (a dict per GPU: its peak
    entry, ``gpu_seconds``, ``mean_utilization_percent``, ``job``), folded a GPU at a time:
    the highest peak, the GPUs near capacity (the ``most`` highest listed, all counted), and
    the GPUs that decide the RMM pool and GPU sharing advice."""

    most: int = LISTED
    count: int = 0
    gpu_seconds: float = 0.0
    highest: dict[str, Any] | None = None  # the highest peak against capacity (bytes on a tie)
    near: Listed[dict[str, Any]] = field(init=False)
    near_count: int = 0
    largest: dict[str, Any] | None = None  # of the GPUs whose peak and capacity are known
    smallest_capacity: float | None = None
    busiest: float | None = None  # of those, with a utilisation too: the highest ...
    tightest: dict[str, Any] | None = None  # ... and the least room (capacity / peak)

    def __post_init__(self) -> None:
        self.near = Listed(self.most)

    @classmethod
    def of(cls, gpus: Iterable[Mapping[str, Any]], most: int = LISTED) -> GpuSummary:
        summary = cls(most)
        for gpu in gpus:
            summary.add(gpu)
        return summary

    def add(self, gpu: Mapping[str, Any]) -> None:
        self.count += 1
        self.gpu_seconds += gpu.get("gpu_seconds") or 0
        rank = (gpu.get("peak_percent") or 0, gpu.get("peak_bytes") or 0)
        if self.highest is None or rank > (self.highest.get("peak_percent") or 0,
                                           self.highest.get("peak_bytes") or 0):
            self.highest = dict(gpu)
        percent = gpu.get("peak_percent")
        if percent is not None and percent >= NEAR_CAPACITY_PERCENT:
            self.near_count += 1
            self.near.offer((percent,), dict(gpu))
        peak, capacity = gpu.get("peak_bytes"), gpu.get("capacity_bytes")
        if not (peak and capacity):
            return
        if self.largest is None or peak > self.largest["peak_bytes"]:
            self.largest = dict(gpu)
        self.smallest_capacity = capacity if self.smallest_capacity is None \
            else min(self.smallest_capacity, capacity)
        util = gpu.get("mean_utilization_percent")
        if util is None:
            return
        self.busiest = util if self.busiest is None else max(self.busiest, util)
        if self.tightest is None or capacity / peak < (self.tightest["capacity_bytes"] /
                                                       self.tightest["peak_bytes"]):
            self.tightest = dict(gpu)


def load_models(text: str | None = None) -> list[GpuModel]:
    """The shipped table of GPU models (or ``text`` in its format), smallest memory first."""
    if text is None:
        text = resources.files("dask_metrics.collector.report").joinpath(
            "gpu_models.csv").read_text(encoding="utf-8")
    lines = [line for line in io.StringIO(text) if not line.startswith("#")]
    models = [GpuModel(r["model"], round(float(r["memory_gib"]) * GIB))
              for r in csv.DictReader(lines)]
    return sorted(models, key=lambda m: (m.memory_bytes, m.name))


def gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GIB:.2f} GiB"


def smallest_fitting(models: Sequence[GpuModel], need: float) -> list[GpuModel]:
    """The models of the smallest memory size that holds ``need`` bytes (all of that size)."""
    fitting = [m for m in models if m.memory_bytes >= need]
    if not fitting:
        return []
    return [m for m in fitting if m.memory_bytes == fitting[0].memory_bytes]


def _job_label(job: Mapping[str, Any]) -> str:
    return f"job {job.get('job_label') or job['job']}" + (f" ({job['job_name']})"
                                                          if job.get("job_name") else "")


def _memory(job: Mapping[str, Any], models: Sequence[GpuModel], headroom: float,
            gpu_models: Mapping[tuple[str, str, str | None], str]) -> dict[str, Any] | None:
    peak = job.get("peak")
    if not peak or not peak.get("peak_bytes"):
        return None
    held = job.get("peak_held_bytes")
    need = (held or peak["peak_bytes"]) * headroom
    capacity = peak.get("capacity_bytes")
    fits = smallest_fitting(models, need)
    model = gpu_models.get((peak["worker"], peak["gpu"], peak.get("uuid")))
    sliced = mig_gpu(shipped_mig(), model, capacity, peak.get("uuid"))
    slices = smallest_slices(sliced, need) if sliced else []
    names = " / ".join(m.name for m in fits)
    if held:
        text = (f"{_job_label(job)} needs {gib(need)} of GPU memory: what it held at most, "
                f"{gib(held)} (its RMM peak in use, sampled at heartbeats, and the memory "
                f"outside the {gib(job['rmm_pool_bytes'])} pool; NVML's peak, "
                f"{gib(peak['peak_bytes'])}, counts the whole pool), x {headroom:g} headroom.")
    else:
        text = (f"{_job_label(job)} needs {gib(need)} of GPU memory: its peak, "
                f"{gib(peak['peak_bytes'])} on {peak['worker']} GPU {peak['gpu']} at "
                f"{peak['time']}, x {headroom:g} headroom.")
    if not fits:
        text += " No GPU in the table holds that much: split the work over more GPUs."
    elif capacity and fits[0].memory_bytes < capacity:
        text += (f" It fits a smaller GPU than the {gib(capacity)} one it ran on: {names} "
                 f"({gib(fits[0].memory_bytes)}).")
    elif capacity and need > capacity:
        text += (f" That is more than its GPU's {gib(capacity)}: ask for {names} "
                 f"({gib(fits[0].memory_bytes)}) or larger.")
    else:
        text += (f" The smallest GPU in the table that holds it: {names} "
                 f"({gib(fits[0].memory_bytes)}).")
    if slices:
        text += (f" Or a MIG slice of its {model}: {' / '.join(slices)} (about "
                 f"{gib(slice_bytes(slices[0]))}).")
    return {"kind": "gpu-memory", "job": job["job"], "text": text,
            "based_on": {"peak_bytes": peak["peak_bytes"], "peak_held_bytes": held,
                         "headroom": headroom,
                         "need_bytes": round(need), "capacity_bytes": capacity,
                         "fits": [m.name for m in fits], "mig_fits": slices,
                         "gpu_model": model}}


def _idle_gpus(job: Mapping[str, Any], idle_percent: float) -> list[dict[str, Any]]:
    out = []
    for use in job.get("per_gpu", ()):
        worker, gpu = use["worker"], use["gpu"]
        if use["gpu_seconds"] and use["mean_utilization_percent"] is not None \
                and use["mean_utilization_percent"] < idle_percent:
            others = [w for s in use.get("shared_gpus") or () for w in s["workers"]
                      if w != worker]
            also = f" (also seen by {', '.join(others)})" if others else ""
            holder = "its workers" if others else "the worker"
            out.append({"kind": "idle-gpu", "job": job["job"], "worker": worker, "gpu": gpu,
                        "text": f"GPU {gpu} of {worker}{also} sat idle through "
                        f"{_job_label(job)}: "
                        f"{use['mean_utilization_percent']:.1f} % mean utilisation over "
                        f"{use['gpu_seconds']:.0f} s while {holder} held the job's tasks "
                        f"(below {idle_percent:g} %). Give the worker fewer GPUs, or one "
                        "worker per GPU (dask-cuda).",
                        "based_on": {"mean_utilization_percent":
                                     use["mean_utilization_percent"],
                                     "gpu_seconds": use["gpu_seconds"]}})
    more = (job.get("idle_gpus") or 0) - len(out)
    if more > 0:
        out.append({"kind": "idle-gpu", "job": job["job"],
                     "text": f"{more} more GPU(s) sat idle through {_job_label(job)} (below "
                     f"{idle_percent:g} % mean utilisation while their workers held the job's "
                     f"tasks): the report lists the {len(out)} idlest.",
                     "based_on": {"idle_gpus": job["idle_gpus"]}})
    return out


def _activity(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What GPM's counters say of the job's GPUs that NVML's utilisation cannot: mostly
    waiting (busy by NVML, few SMs at work), and tensor cores left idle."""
    util, sm = job.get("mean_utilization_percent"), job.get("mean_sm_active_percent")
    tensor = job.get("mean_tensor_active_percent")
    if util is None or sm is None:
        return []
    numbers = {"mean_utilization_percent": util, "mean_sm_active_percent": sm,
               "mean_tensor_active_percent": tensor}
    tensor_text = "" if tensor is None else f" and its tensor cores {tensor:.1f} %"
    out = []
    if util >= BUSY_PERCENT and sm < util * WAITING_SHARE:
        out.append({"kind": "gpu-waiting", "job": job["job"], "text":
                    f"{_job_label(job)} kept its GPUs {util:.0f} % busy by NVML's utilisation, "
                    f"but only {sm:.1f} % of their SMs were active on average{tensor_text}: "
                    "the GPUs mostly waited between small kernels. Fewer GPUs, MIG slices "
                    "or more workers (threads) per GPU would do the same work.",
                    "based_on": numbers})
    if tensor is not None and tensor < TENSOR_IDLE_PERCENT and sm >= TENSOR_WORTH_PERCENT:
        out.append({"kind": "tensor-idle", "job": job["job"], "text":
                    f"{_job_label(job)} left its tensor cores idle ({tensor:.1f} % active) "
                    f"while {sm:.1f} % of the SMs worked: if that work is matrix math, TF32 or "
                    "bf16 (torch.backends.cuda.matmul.allow_tf32, torch.autocast; "
                    "CUPY_TF32=1) runs it on them.", "based_on": numbers})
    return out


def _rmm_pool(job: Mapping[str, Any], headroom: float) -> list[dict[str, Any]]:
    """An RMM pool far larger than what the job held in it."""
    pool, used = job.get("rmm_pool_bytes"), job.get("peak_rmm_used_bytes")
    if not pool or not used:
        return []
    size = math.ceil(used * headroom / POOL_ROUNDING) * POOL_ROUNDING
    if pool < used * headroom * POOL_OVERSIZED:
        return []
    return [{"kind": "rmm-pool", "job": job["job"], "text":
             f"{_job_label(job)} held at most {gib(used)} of its {gib(pool)} RMM pool "
             f"(sampled at heartbeats: a lower bound): a pool of {gib(size)} "
             f"(rmm_pool_size, x {headroom:g} headroom) would leave the rest of the GPU free.",
             "based_on": {"rmm_pool_bytes": pool, "peak_rmm_used_bytes": used,
                          "headroom": headroom, "rmm_pool_size_bytes": size}}]


def _rmm_untracked(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Workers with RMM pools whose use never showed: nothing allocated through RMM, or a
    pool that does not track allocations; either way NVML's memory is the pool's."""
    rmm = report["session"].get("rmm") if "session" in report else None
    if not rmm or rmm["workers_tracked"]:
        return []
    workers = rmm["workers_with_pool"]
    return [{"kind": "rmm-untracked", "text":
             f"{len(workers)} worker(s) ran RMM pools ({', '.join(workers[:5])}"
             f"{', ...' if len(workers) > 5 else ''}) but Dask saw no bytes in use in them all "
             "session: either nothing was allocated through RMM, or the pools do not track "
             "allocations. NVML counts a whole pool as used, so the memory figures are the "
             "pools'. If the work allocates through RMM (cuDF, CuPy or PyTorch with RMM's "
             "allocator), start the workers with dask-cuda's --rmm-track-allocations.",
             "based_on": {"workers_with_pool": workers, "workers_tracked": []}}]


def _near_capacity(gpu: Mapping[str, Any]) -> list[dict[str, Any]]:
    percent = gpu.get("peak_percent")
    if percent is None or percent < NEAR_CAPACITY_PERCENT:
        return []
    capacity = gpu["capacity_bytes"]
    limit = capacity * DEVICE_MEMORY_LIMIT_SHARE
    during = f" during job {gpu.get('job_label') or gpu['job']}" if gpu.get("job") else ""
    return [{"kind": "near-capacity", "worker": gpu["worker"], "gpu": gpu["gpu"],
             "text": f"{gpu['worker']} GPU {gpu['gpu']} came close to its capacity: "
             f"{percent:.1f} % ({gib(gpu['peak_bytes'])} of {gib(capacity)}) at "
             f"{gpu['time']}{during}.",
             "based_on": {"peak_percent": percent, "peak_bytes": gpu["peak_bytes"],
                          "capacity_bytes": capacity}},
            {"kind": "dask-setting", "worker": gpu["worker"], "gpu": gpu["gpu"],
             "text": f"Set dask-cuda's device_memory_limit to about {gib(limit)} "
             f"({DEVICE_MEMORY_LIMIT_SHARE:.0%} of {gib(capacity)}) on {gpu['worker']}, so "
             f"that it spills device memory to host before it runs out: the peak reached "
             f"{percent:.1f} %.",
             "based_on": {"peak_percent": percent, "capacity_bytes": capacity,
                          "device_memory_limit_bytes": round(limit)}}]


def _pool(gpus: GpuSummary, headroom: float) -> list[dict[str, Any]]:
    """One RMM pool size for the cluster: the largest peak x headroom, where every GPU holds
    it."""
    top, smallest = gpus.largest, gpus.smallest_capacity
    if top is None or smallest is None:
        return []
    pool = math.ceil(top["peak_bytes"] * headroom / POOL_ROUNDING) * POOL_ROUNDING
    if pool > smallest:
        return []
    return [{"kind": "dask-setting", "text": f"An RMM pool of {gib(pool)} per worker "
             f"(rmm_pool_size, dask-cuda) holds the largest peak, {gib(top['peak_bytes'])} on "
             f"{top['worker']} GPU {top['gpu']}, x {headroom:g} headroom, and leaves the rest of "
             f"the smallest GPU's {gib(smallest)} free.",
             "based_on": {"peak_bytes": top["peak_bytes"], "headroom": headroom,
                          "rmm_pool_size_bytes": pool, "smallest_capacity_bytes": smallest}}]


def _sharing(gpus: GpuSummary, headroom: float) -> list[dict[str, Any]]:
    """Workers per GPU: where every GPU was mostly idle and its peak leaves room for more."""
    busiest, tight = gpus.busiest, gpus.tightest
    if busiest is None or tight is None:
        return []
    fit = int(tight["capacity_bytes"] // (tight["peak_bytes"] * headroom))
    if busiest >= SHARE_BELOW_PERCENT or fit < 2:
        return []
    per_gpu = min(fit, 4)
    return [{"kind": "dask-setting", "text": f"The GPUs were lightly used over the session "
             f"(the busiest was busy {busiest:.1f} % of its sampled time, idle time between "
             f"jobs included, where the job tables count only each job's own time) and each "
             f"peak x {headroom:g} fits {fit} times into its GPU: {per_gpu} workers per GPU "
             f"(or {per_gpu} threads per worker) would use them better.",
             "based_on": {"max_mean_utilization_percent": busiest, "fits_times": fit,
                          "headroom": headroom, "workers_per_gpu": per_gpu}}]


def recommendations(report: Mapping[str, Any], gpus: GpuSummary,
                    models: Sequence[GpuModel], headroom: float) -> list[dict[str, Any]]:
    """Every recommendation, each with its ``text`` and the numbers it is ``based_on``:
    memory per job, GPUs idle through a job, GPUs waiting or tensor cores idle (GPM), RMM
    pools, GPUs near capacity, Dask settings."""
    idle_percent = report["rules"]["idle_below_percent"]
    gpu_models = {(w["worker"], g["gpu"], g.get("uuid")): g["model"]
                  for w in report.get("session", {}).get("workers", ()) for g in w["gpus"]
                  if g.get("model")}
    out: list[dict[str, Any]] = []
    for job in report["jobs"]:
        if (memory := _memory(job, models, headroom, gpu_models)) is not None:
            out.append(memory)
        out += _idle_gpus(job, idle_percent)
        out += _activity(job)
        out += _rmm_pool(job, headroom)
    out += _rmm_untracked(report)
    for gpu in gpus.near:
        out += _near_capacity(gpu)
    if gpus.near.omitted:
        out.append({"kind": "near-capacity", "text": f"{gpus.near.omitted} more GPU(s) came "
                    f"within {100 - NEAR_CAPACITY_PERCENT:g} % of their capacity: the report "
                    f"lists the {gpus.most} closest.",
                    "based_on": {"gpus_near_capacity": gpus.near_count}})
    if not report["jobs"]:  # sizes from a session without work would be advice on nothing
        return out + _no_jobs(gpus)
    if not any(job.get("rmm_pool_bytes") for job in report["jobs"]):
        out += _pool(gpus, headroom)  # with a pool, NVML's peaks are the pool's size
    out += _sharing(gpus, headroom)
    return out


def _no_jobs(gpus: GpuSummary) -> list[dict[str, Any]]:
    return [{"kind": "idle-gpu", "text": f"No job ran in this session: its {gpus.count} GPU(s) "
             f"were held for {gpus.gpu_seconds:.0f} GPU seconds without Dask work. Release them "
             "between runs (scale the cluster down, or adapt()).",
             "based_on": {"gpus": gpus.count, "gpu_seconds": gpus.gpu_seconds}}]
