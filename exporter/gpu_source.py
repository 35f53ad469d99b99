"""What the sampler sees of a GPU source, whichever it is (NVML: nvml_source.py; simulated
GPUs: simulated.py): plain ``Reading`` values, a ``DeviceInfo`` per GPU and two exceptions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

from dask_metrics.exporter.selection import Candidate


class SourceUnavailable(RuntimeError):
    """NVML cannot be used at all (no library, no driver, version mismatch)."""


class DeviceFailed(RuntimeError):
    """One device could not be read this round (lost, reset, driver error)."""


@dataclass(frozen=True)
class DeviceInfo:
    uuid: str
    name: str
    pci_bus_id: str
    gpm: bool = False  # the GPU's activity counters (SM, tensor, DRAM) can be read


@dataclass(frozen=True)
class Reading:
    """One sample of one GPU; ``None`` means the device does not support that value."""

    memory_used: float | None = None
    memory_total: float | None = None
    memory_reserved: float | None = None
    utilization: float | None = None
    memory_bandwidth: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    processes: dict[int, float] = field(default_factory=dict)
    # GPM means (0-1) by series name, over the last ``activity_seconds`` (empty on the
    # first sample of a device: a mean needs two)
    activity: dict[str, float] = field(default_factory=dict)
    activity_seconds: float = 0.0


class GpuSource(Protocol):
    simulated: bool
    errors: Counter[tuple[str, str]]

    def start(self) -> None: ...
    def close(self) -> None: ...
    def driver_version(self) -> str: ...
    def candidates(self) -> list[Candidate]: ...
    def describe(self, uuid: str) -> DeviceInfo: ...
    def read(self, uuid: str, pids: Collection[int], energy: bool = True) -> Reading:
        """One sample; ``energy`` False may skip the energy counter (costly on real GPUs)."""
        ...
