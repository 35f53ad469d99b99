"""Simulated GPUs for machines without any: values that move with the worker's real work.

Attached to a worker (its pid from the worker-info file, the worker preload or ``--pids``),
each simulated GPU mirrors that worker process: utilisation is the process's CPU use and
memory used is its resident memory, so a task that computes or allocates shows up the way
it would on a GPU (an idle GPU once the process is gone); their GPM activities are fixed
shares of that load (no tensor cores: CPU work has none). With no process to mirror they
follow a slow synthetic wave. Every
series they produce is labelled ``simulated="true"``.

Their UUIDs are ``GPU-5151a7ed-…``: the first group marks them simulated, the rest is a
UUID5 of the host, the worker label and the GPU's index, so two workers never share one
(the shared-GPU alert stays quiet on a demo) while a worker keeps its UUIDs across restarts,
and a worker preload and its sidecar, which label the same worker, agree on them.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from dask_metrics import contract as m
from dask_metrics.exporter.gpu_source import DeviceInfo, Reading
from dask_metrics.exporter.selection import Candidate

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class Usage:
    """CPU seconds and resident bytes of a set of processes, at one time."""

    cpu_seconds: float
    rss_bytes: float


def process_usage(pids: Collection[int], proc: str = "/proc") -> Usage | None:
    """Summed over the live ``pids`` (Linux /proc); None when none of them can be read."""
    cpu = rss = 0.0
    found = False
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"{proc}/{pid}/statm", "rb") as fh:
                statm = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces
        cpu += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
        rss += int(statm.split()[1]) * _PAGE
        found = True
    return Usage(cpu, rss) if found else None


class SimulatedSource:
    """``count`` synthetic GPUs of ``memory_total`` bytes each; ``instance`` says whose
    (host, worker label) they are, asked again whenever the GPUs are listed (a sidecar learns
    its worker's name from the worker-info file after it starts)."""

    simulated = True

    def __init__(self, count: int, memory_total: float = 16 * 2**30,
                 instance: Callable[[], tuple[str, str]] | None = None) -> None:
        self.errors: Counter[tuple[str, str]] = Counter()
        self.count = count
        self.memory_total = memory_total
        self._instance = instance or (lambda: ("", ""))
        self._indices: dict[str, int] = {}
        self._t0 = time.time()
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, Usage]] = {}  # per GPU: the previous mirror reading
        self._energy: dict[str, tuple[float, float]] = {}  # per GPU: (time, joules so far)
        self._activity_at: dict[str, float] = {}  # per GPU: time of the previous reading

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def driver_version(self) -> str:
        return "simulated"

    def candidates(self) -> list[Candidate]:
        host, worker = self._instance()
        found = [Candidate(i, simulated_uuid(i, host=host, worker=worker))
                 for i in range(self.count)]
        self._indices.update((c.uuid, i) for i, c in enumerate(found))
        return found

    def _index(self, uuid: str) -> int:
        if uuid not in self._indices:
            self.candidates()
        return self._indices.get(uuid, 0)

    def describe(self, uuid: str) -> DeviceInfo:
        index = self._index(uuid)
        return DeviceInfo(uuid, "Simulated GPU", f"00000000:{index + 1:02X}:00.0", gpm=True)

    def read(self, uuid: str, pids: Collection[int], energy: bool = True) -> Reading:
        now = time.time()
        usage = (process_usage(pids) or Usage(0.0, 0.0)) if pids else None  # gone: an idle GPU
        with self._lock:
            if usage is None:
                phase = 0.5 + 0.5 * math.sin((now - self._t0) / 20.0 + self._index(uuid))
                load, used = phase, self.memory_total * (0.1 + 0.6 * phase)
            else:
                load = self._cpu_share(uuid, now, usage)
                used = min(usage.rss_bytes, self.memory_total)
            power = 60 + 240 * load
            joules = self._integrate(uuid, now, power)
            then = self._activity_at.get(uuid)
            self._activity_at[uuid] = now
        return Reading(
            memory_used=used,
            memory_total=self.memory_total,
            memory_reserved=self.memory_total * 0.01,
            utilization=load,
            memory_bandwidth=load * 0.6,
            power_watts=power,
            energy_joules=joules,
            temperature_celsius=35 + 40 * load,
            sm_clock_hertz=1.41e9,
            processes={pid: used / len(pids) for pid in pids},
            activity={} if then is None else {
                name: load * share for name, share in _ACTIVITY_SHARES.items()},
            activity_seconds=0.0 if then is None else max(0.0, now - then),
        )

    def _cpu_share(self, uuid: str, now: float, usage: Usage) -> float:
        """The mirrored processes' CPU use since the previous reading, as a 0-1 fraction."""
        previous = self._last.get(uuid)
        self._last[uuid] = (now, usage)
        if previous is None or now <= previous[0]:
            return 0.0
        return max(0.0, min(1.0, (usage.cpu_seconds - previous[1].cpu_seconds)
                            / (now - previous[0])))

    def _integrate(self, uuid: str, now: float, power: float) -> float:
        """Energy as the counter a real GPU keeps: the integral of power since start."""
        then, joules = self._energy.get(uuid, (now, 0.0))
        joules += power * max(0.0, now - then)
        self._energy[uuid] = (now, joules)
        return joules


# A simulated GPU's GPM activities as shares of its load.
_ACTIVITY_SHARES = {
    m.SM_ACTIVE.name: 0.7, m.SM_OCCUPANCY.name: 0.25, m.TENSOR_ACTIVE.name: 0.0,
    m.DRAM_ACTIVE.name: 0.4, m.FP64_ACTIVE.name: 0.0, m.FP32_ACTIVE.name: 0.5,
    m.FP16_ACTIVE.name: 0.0,
}
_NAMESPACE = uuidlib.UUID("5151a7ed-0000-4000-8000-000000000000")
SIMULATED_PREFIX = "GPU-5151a7ed-"


def simulated_uuid(index: int, host: str = "", worker: str = "") -> str:
    """The UUID of simulated GPU ``index`` of ``worker`` on ``host``: ``GPU-5151a7ed-`` and
    the last four groups of a UUID5 of the three, so distinct per worker and index and the
    same every time."""
    digest = uuidlib.uuid5(_NAMESPACE, f"{host or socket.gethostname()}/{worker}/{index}")
    return SIMULATED_PREFIX + str(digest).split("-", 1)[1]
