"""The report's figures of GPU use (pure): numbers rounded for JSON, a peak's keys, energy
with its note, one GPU counted once across the workers that see it, SM and tensor
activity, RMM, and the use of a set of GPUs as report.json writes it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from typing import Any

from dask_metrics.collector.attribution.usage import Usage, larger, total
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.collector.peaks.peak import Peak

JOULES_PER_KWH = 3.6e6


def num(value: float | None, digits: int = 3) -> float | int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    rounded = round(float(value), digits)
    return int(rounded) if rounded.is_integer() else rounded


def rfc3339(ms: int | None) -> str | None:
    return None if ms is None else format_rfc3339(ms)


PEAK_KEYS = ("worker", "gpu", "uuid", "peak_bytes", "capacity_bytes", "peak_percent", "time",
             "exact", "upper_bound_bytes", "caveat")


def peak_entry(p: Peak) -> dict[str, Any]:
    return {"worker": p.worker, "gpu": p.gpu, "uuid": p.uuid, "peak_bytes": num(p.peak_bytes),
            "capacity_bytes": num(p.total_bytes), "peak_percent": p.peak_percent,
            "time": format_rfc3339(p.time), "exact": p.exact,
            "upper_bound_bytes": None if p.upper_bytes is None or math.isinf(p.upper_bytes)
            else num(p.upper_bytes), "caveat": p.caveat() or None}


def energy_entry(joules: float, measured: int, gpus: int, resets: bool, metered: bool
                 ) -> dict[str, Any]:
    """Energy of some GPUs' intervals: ``joules`` measured by ``measured`` of the ``gpus``;
    None (and a note saying why) where none measured it. ``resets``: an exporter restarted
    within them; ``metered``: some of these GPUs have an energy counter (then a missing
    figure is the range's fault, not the GPUs')."""
    if not measured:
        note = ("not measured: no interval between two GPU samples of its workers counts for "
                "it (shorter than a scrape interval, or in a gap longer than --max-age: see "
                "the warnings)" if not gpus
                else "not measured: no two energy readings of its GPUs fall within it (shorter "
                "than a scrape interval)" if metered
                else "not reported: these GPUs report no energy counter")
        return {"energy_joules": None, "energy_kwh": None, "energy_note": note}
    notes = []
    if measured < gpus:
        notes.append(f"{measured} of {gpus} GPU(s) report energy: the others are not "
                     "included (a lower bound)")
    if resets:
        notes.append("an exporter restarted within it: its busy time and energy count from "
                     "the restart there (lower bounds)")
    note = "; ".join(notes) or None
    return {"energy_joules": num(joules, 1), "energy_kwh": num(joules / JOULES_PER_KWH, 6),
            "energy_note": note}


def device_key(worker: str, gpu: str, uuid: str) -> str:
    """Which physical GPU (or MIG instance) a worker's GPU is: its UUID, else the worker's
    own GPU (no UUID to match another worker's by)."""
    return uuid or f"{worker}/{gpu}"


# Usage's sums: of one device seen by several workers, the largest view of each is kept.
_SUMMED = ("seconds", "busy", "idle", "energy", "energy_intervals", "resets", "sm_active",
           "sm_measured", "tensor_active", "tensor_measured")


def by_device(usages: Mapping[tuple[str, str, str], Usage]
              ) -> tuple[dict[str, Usage], dict[str, list[str]]]:
    """{uuid: Usage} and {uuid: workers} of the GPUs that more than one worker saw.

    One GPU is one GPU: two workers whose exporters see the same device (same UUID, or the
    same MIG instance) each report the whole device's busy time and energy, so their sums
    would count it twice. Each figure is the largest of the workers' views: the device's
    use over the longest of their stretches (a lower bound where their stretches differ;
    the report says which GPUs were shared)."""
    groups: dict[str, list[tuple[str, Usage]]] = {}
    for (worker, gpu, uuid), u in usages.items():
        groups.setdefault(device_key(worker, gpu, uuid), []).append((worker, u))
    merged: dict[str, Usage] = {}
    shared: dict[str, list[str]] = {}
    for device, seen in groups.items():
        if len(seen) == 1:
            merged[device] = seen[0][1]
            continue
        views = [u for _, u in seen]
        merged[device] = Usage(
            **{f: max(getattr(u, f) for u in views) for f in _SUMMED},
            first=min((u.first for u in views if u.first is not None), default=None),
            last=max((u.last for u in views if u.last is not None), default=None),
            rmm_used=max((u.rmm_used for u in views if u.rmm_used is not None), default=None),
            rmm_pool=max((u.rmm_pool for u in views if u.rmm_pool is not None), default=None))
        shared[device] = sorted({w for w, _ in seen})
    return merged, shared


def activity_entry(whole: Usage) -> dict[str, Any]:
    """Mean SM and tensor activity over the time GPM measured them (None: no GPM), and the
    share of the GPU seconds that time covers."""
    def mean(active: float, measured: float) -> float | int | None:
        return num(active / measured * 100, 2) if measured else None

    return {"mean_sm_active_percent": mean(whole.sm_active, whole.sm_measured),
            "mean_tensor_active_percent": mean(whole.tensor_active, whole.tensor_measured),
            "activity_measured_seconds": num(whole.sm_measured) if whole.sm_measured
            else None}


def rmm_entry(used: float | None, pool: float | None, untracked_pool: bool
              ) -> dict[str, Any]:
    """The largest RMM use and pool of some GPUs' workers (sampled at heartbeats, so the
    peak in use is a lower bound), and a note on what they can and cannot say.
    ``untracked_pool``: one of those workers has a pool and Dask never saw its RMM use above
    0 in the session (its pool may not track allocations)."""
    note = None
    if pool and not used:
        note = ("no bytes in use in the RMM pool while it ran: either it allocated nothing "
                "through RMM, or the pool does not track allocations (dask-cuda "
                "--rmm-track-allocations), so what it held in the pool is unknown"
                if untracked_pool else
                "no bytes in use in the RMM pool while it ran: it allocated nothing through "
                "RMM (the same workers' pools show other use, so they track allocations)")
    elif used:
        note = ("sampled at the workers' heartbeats as the scheduler's scrapes saw them: "
                "the true peak may be higher")
    return {"peak_rmm_used_bytes": num(used), "rmm_pool_bytes": num(pool), "rmm_note": note}


def held_bytes(peak: float, used: float | None, pool: float | None, tracked: bool
               ) -> tuple[float, bool]:
    """What a job on an RMM pool held at most on one GPU, and whether the pool said so: its
    worker's peak RMM use plus what NVML saw outside the pool at the GPU's peak (CUDA
    context, other allocators); NVML's ``peak`` where the worker has no pool that tracks
    allocations (``tracked``: Dask saw its RMM use above 0 in the session). NVML alone
    counts a whole pool as used."""
    if pool and (used or tracked):
        return (used or 0) + max(0.0, peak - pool), True
    return peak, False


class UseSum:
    """``use_entry``'s figures of a set of GPUs, added a GPU at a time in little memory: the
    GPUs that one worker sees are summed as they come; the views of a GPU that several
    workers see (``shared``: their device keys) are kept until ``entry`` counts each such
    GPU once (``by_device``)."""

    __slots__ = (
        "devices",
        "measured",
        "metered",
        "rmm_pool",
        "rmm_used",
        "shared",
        "untracked_pool",
        "views",
        "whole",
    )

    def __init__(self, shared: Container[str] = frozenset()) -> None:
        self.shared = shared
        self.whole = Usage()
        self.devices = self.measured = 0
        self.views: dict[tuple[str, str, str], Usage] = {}
        self.metered = self.untracked_pool = False
        self.rmm_used: float | None = None
        self.rmm_pool: float | None = None

    def add(self, key: tuple[str, str, str], u: Usage, metered: bool, tracked: bool) -> None:
        """One GPU's use (``key``: worker, gpu, uuid); ``metered``: it has an energy
        counter; ``tracked``: its worker's RMM pool tracks allocations."""
        if device_key(*key) in self.shared:
            self.views.setdefault(key, Usage()).add(u)
        else:
            self.whole.add(u)
            self.devices += 1
            self.measured += bool(u.energy_intervals)
        self.metered |= metered
        self.rmm_used = larger(self.rmm_used, u.rmm_used)
        self.rmm_pool = larger(self.rmm_pool, u.rmm_pool)
        self.untracked_pool |= bool(u.rmm_pool) and not tracked

    def entry(self) -> dict[str, Any]:
        """GPU seconds, busy seconds, mean utilisation, idle seconds, energy, SM/tensor
        activity and RMM of these GPUs, each device counted once."""
        merged, shared = by_device(self.views)
        whole = total({"": self.whole, **merged})
        devices = self.devices + len(merged)
        measured = self.measured + sum(bool(u.energy_intervals) for u in merged.values())
        mean = whole.busy / whole.seconds * 100 if whole.seconds else None
        return {"gpus_used": devices, "gpu_seconds": num(whole.seconds),
                "busy_seconds": num(whole.busy), "mean_utilization_percent": num(mean, 2),
                **activity_entry(whole),
                **rmm_entry(self.rmm_used, self.rmm_pool, self.untracked_pool),
                "idle_gpu_seconds": num(whole.idle),
                **energy_entry(whole.energy, measured, devices, whole.resets > 0,
                               self.metered),
                "shared_gpus": [{"uuid": u, "workers": w} for u, w in shared.items()] or None,
                "seen_first": rfc3339(whole.first), "seen_last": rfc3339(whole.last)}


def shared_devices(gpus: Iterable[tuple[str, str, str]]) -> frozenset[str]:
    """The device keys of the GPUs that more than one (worker, gpu) of ``gpus`` is."""
    seen = Counter(device_key(*g) for g in dict.fromkeys(gpus))
    return frozenset(d for d, n in seen.items() if n > 1)


def use_entry(usages: Mapping[tuple[str, str, str], Usage],
              metered: frozenset[tuple[str, str, str]] = frozenset(),
              tracked: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``UseSum.entry`` of ``usages`` (keyed by (worker, gpu, uuid)); ``metered``: the
    (worker, gpu, uuid) with an energy counter; ``tracked``: the workers whose RMM pools
    track allocations."""
    found = UseSum(shared_devices(usages))
    for key, u in usages.items():
        found.add(key, u, key in metered, key[0] in tracked)
    return found.entry()


# ---- jobs.csv rows (the export's, from the provenance branch) -------------------------------
