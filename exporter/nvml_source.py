"""Reads GPUs through NVML (nvidia-ml-py). All NVML quirks live here: version fallbacks,
unsupported calls, lost devices, handles that go stale; the sampler above sees only what
gpu_source.py declares.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from dask_metrics.exporter.gpm_reader import GpmReader
from dask_metrics.exporter.gpu_source import DeviceFailed, DeviceInfo, Reading, SourceUnavailable
from dask_metrics.exporter.selection import Candidate


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlSource:
    """Reads GPUs through the real nvidia-ml-py binding; NVML is initialised once."""

    simulated = False

    def __init__(self) -> None:
        self.errors: Counter[tuple[str, str]] = Counter()
        self._nvml: Any = None
        self._handles: dict[str, Any] = {}
        self._unsupported: set[tuple[str, str]] = set()
        self._gpm_devices: dict[str, bool] = {}  # uuid -> GPM supported (from describe)
        self._gpm: dict[str, GpmReader] = {}
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML; a no-op when already initialised (callers may check early)."""
        if self._nvml is not None:
            return
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise SourceUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise SourceUnavailable(_init_hint(pynvml, exc)) from None
        self._nvml = pynvml
        self._handles.clear()

    def close(self) -> None:
        if self._nvml is not None:
            for uuid in list(self._gpm):
                self._drop_gpm(uuid)
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None

    # -- inventory -------------------------------------------------------------------------
    def driver_version(self) -> str:
        return self._call("driver_version", self._nvml.nvmlSystemGetDriverVersion, "") or ""

    def candidates(self) -> list[Candidate]:
        nv = self._nvml
        found: list[Candidate] = []
        self._handles.clear()
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise SourceUnavailable(f"NVML cannot count devices: {exc}") from None
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError as exc:
                self._count_error("device_handle", exc)
                continue  # a lost GPU at start-up: it is retried on the next inventory
            self._handles[uuid] = handle
            found.append(Candidate(index, uuid))
            found.extend(self._mig_candidates(handle))
        return found

    def _mig_candidates(self, parent: Any) -> list[Candidate]:
        nv = self._nvml
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(parent)
            if current != nv.NVML_DEVICE_MIG_ENABLE:
                return []
            slots = nv.nvmlDeviceGetMaxMigDeviceCount(parent)
        except nv.NVMLError:
            return []  # no MIG support on this device or driver
        found = []
        for slot in range(slots):
            try:
                handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError:
                continue  # empty slot
            self._handles[uuid] = handle
            found.append(Candidate(None, uuid))
        return found

    def describe(self, uuid: str) -> DeviceInfo:
        nv = self._nvml
        handle = self._handle(uuid)
        name = self._call("name", lambda: _text(nv.nvmlDeviceGetName(handle)), uuid) or ""
        pci_handle = handle
        if self._call("is_mig", lambda: nv.nvmlDeviceIsMigDeviceHandle(handle), uuid):
            pci_handle = self._call(
                "mig_parent", lambda: nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle), uuid
            ) or handle
        pci = self._call("pci_info", lambda: nv.nvmlDeviceGetPciInfo(pci_handle), uuid)
        bus_id = _text(pci.busId) if pci is not None else ""
        return DeviceInfo(uuid, name, bus_id, self._gpm_supported(uuid, pci_handle))

    def _gpm_supported(self, uuid: str, parent: Any) -> bool:
        """Whether the device's activity counters can be read: a MIG device is read
        through its parent and its GPU instance id (NVML has no GPM sample of a MIG
        handle); the sample buffers are set up at the first read."""
        self._drop_gpm(uuid)
        nv = self._nvml
        support = self._call("gpm_support", lambda: nv.nvmlGpmQueryDeviceSupport(parent), uuid)
        supported = bool(support is not None and support.isSupportedDevice)
        self._gpm_devices[uuid] = supported
        return supported

    # -- sampling --------------------------------------------------------------------------
    def read(self, uuid: str, pids: Collection[int], energy: bool = True) -> Reading:
        try:
            return self._read(uuid, pids, energy)
        except DeviceFailed:
            self._drop_gpm(uuid)  # a mean across a lost or reset device would be wrong
            raise

    def _read(self, uuid: str, pids: Collection[int], energy: bool) -> Reading:
        nv = self._nvml
        handle = self._handle(uuid)
        memory = self._memory(handle, uuid)
        if memory is None:
            raise DeviceFailed(f"{uuid}: memory information unavailable")
        total, used, reserved = memory
        util = self._call("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(handle), uuid)
        power = self._call("power", lambda: nv.nvmlDeviceGetPowerUsage(handle), uuid)
        joules = self._call(
            "energy", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle), uuid
        ) if energy else None
        temp = self._call(
            "temperature",
            lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
            uuid,
        )
        clock = self._call(
            "sm_clock", lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM), uuid
        )
        activity, span = self._activity(uuid, handle)
        processes: dict[int, float] = {}
        if pids:
            running = self._call(
                "processes", lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle), uuid
            ) or []
            for proc in running:
                if proc.pid in pids and proc.usedGpuMemory is not None:
                    processes[proc.pid] = processes.get(proc.pid, 0) + float(proc.usedGpuMemory)
        return Reading(
            memory_used=float(used),
            memory_total=float(total),
            memory_reserved=None if reserved is None else float(reserved),
            utilization=None if util is None else util.gpu / 100.0,
            memory_bandwidth=None if util is None else util.memory / 100.0,
            power_watts=None if power is None else power / 1000.0,
            energy_joules=None if joules is None else joules / 1000.0,
            temperature_celsius=None if temp is None else float(temp),
            sm_clock_hertz=None if clock is None else clock * 1e6,
            processes=processes,
            activity=activity,
            activity_seconds=span,
        )

    def _activity(self, uuid: str, handle: Any) -> tuple[dict[str, float], float]:
        if not self._gpm_devices.get(uuid):
            return {}, 0.0
        reader = self._gpm.get(uuid)
        if reader is None:
            reader = self._call("gpm_setup", lambda: self._new_gpm_reader(uuid, handle), uuid)
            if reader is None:
                return {}, 0.0
            self._gpm[uuid] = reader
        return self._call("gpm", reader.read, uuid) or ({}, 0.0)

    def _new_gpm_reader(self, uuid: str, handle: Any) -> GpmReader:
        nv = self._nvml
        instance = None
        if nv.nvmlDeviceIsMigDeviceHandle(handle):
            instance = nv.nvmlDeviceGetGpuInstanceId(handle)
            handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        return GpmReader(nv, handle, instance)

    def _drop_gpm(self, uuid: str) -> None:
        reader = self._gpm.pop(uuid, None)
        if reader is not None:
            reader.free()

    def _memory(self, handle: Any, uuid: str) -> tuple[int, int, int | None] | None:
        nv = self._nvml
        if (uuid, "memory_v2") not in self._unsupported:
            mem = self._call(
                "memory_v2",
                lambda: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2),
                uuid,
                fallback_errors=(nv.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,),
            )
            if mem is not None:
                return mem.total, mem.used, mem.reserved
            if (uuid, "memory_v2") not in self._unsupported:
                return None
        mem = self._call("memory", lambda: nv.nvmlDeviceGetMemoryInfo(handle), uuid)
        return None if mem is None else (mem.total, mem.used, None)

    # -- plumbing --------------------------------------------------------------------------
    def _handle(self, uuid: str) -> Any:
        handle = self._handles.get(uuid)
        if handle is None:
            nv = self._nvml
            try:
                handle = nv.nvmlDeviceGetHandleByUUID(uuid)
            except nv.NVMLError as exc:
                self._raise_for(exc, "device_handle", uuid)
            self._handles[uuid] = handle
        return handle

    def _call(
        self,
        call: str,
        fn: Callable[[], Any],
        uuid: str,
        fallback_errors: tuple[int, ...] = (),
    ) -> Any:
        """Run one NVML call: unsupported -> None (and never asked again), a lost device
        -> DeviceFailed, a dead driver -> SourceUnavailable, anything else -> None, counted."""
        if (uuid, call) in self._unsupported:
            return None
        nv = self._nvml
        try:
            return fn()
        except nv.NVMLError as exc:
            if exc.value in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND,
                             *fallback_errors):
                self._unsupported.add((uuid, call))
                return None
            self._raise_for(exc, call, uuid)
            return None

    def _raise_for(self, exc: Any, call: str, uuid: str) -> None:
        nv = self._nvml
        self._count_error(call, exc)
        if exc.value in (nv.NVML_ERROR_UNINITIALIZED, nv.NVML_ERROR_DRIVER_NOT_LOADED,
                         nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH, nv.NVML_ERROR_LIBRARY_NOT_FOUND):
            raise SourceUnavailable(f"NVML failed during {call}: {exc}")
        if exc.value in (nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_INVALID_ARGUMENT,
                         nv.NVML_ERROR_NOT_FOUND, nv.NVML_ERROR_RESET_REQUIRED,
                         nv.NVML_ERROR_TIMEOUT, nv.NVML_ERROR_UNKNOWN):
            self._handles.pop(uuid, None)  # re-acquired by UUID once the device is back
            raise DeviceFailed(f"{uuid}: {call} failed: {exc}")

    def _count_error(self, call: str, exc: Any) -> None:
        self.errors[(call, error_name(self._nvml, exc.value))] += 1


def error_name(nv: Any, value: int) -> str:
    """``GPU_IS_LOST`` for NVML_ERROR_GPU_IS_LOST: stable label values for error counters."""
    for attr in dir(nv):
        if attr.startswith("NVML_ERROR_") and getattr(nv, attr) == value:
            return attr.removeprefix("NVML_ERROR_")
    return str(value)


def _init_hint(nv: Any, exc: Any) -> str:
    hints = {
        nv.NVML_ERROR_LIBRARY_NOT_FOUND: "libnvidia-ml.so.1 was not found: is the NVIDIA "
        "driver installed and, in a container, is the NVIDIA runtime enabled?",
        nv.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
        nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the NVML library and the kernel driver "
        "versions differ: reboot or reload the driver after an upgrade",
        nv.NVML_ERROR_NO_PERMISSION: "no permission to open the GPU device files",
    }
    hint = hints.get(exc.value, "")
    return f"NVML initialisation failed: {exc}" + (f" ({hint})" if hint else "")
