"""Background sampling of a worker's GPUs into immutable snapshots.

Scrapes only read the latest snapshot, so a slow or hung NVML call never slows a scrape,
and peaks and busy time are computed from every internal sample, not just scraped ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dask_metrics import contract as m
from dask_metrics.exporter.energy import EnergyCounter
from dask_metrics.exporter.gpu_source import (
    DeviceFailed,
    DeviceInfo,
    GpuSource,
    Reading,
    SourceUnavailable,
)
from dask_metrics.exporter.identity import GpuRef
from dask_metrics.exporter.peak import WindowMax
from dask_metrics.exporter.scrapes import ScrapeLog
from dask_metrics.exporter.selection import select
from dask_metrics.exporter.target import Target

logger = logging.getLogger(__name__)

RETRY_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class GpuSnapshot:
    ref: GpuRef
    info: DeviceInfo
    up: bool
    reading: Reading | None
    peak_bytes: float | None
    busy_seconds: float
    peak_time: float = 0.0  # unix time of the sample that set peak_bytes
    next_peak: tuple[float, float] | None = None  # (bytes, unix time): the max after it
    # series name -> seconds: the integral of each GPM activity that has a counter
    active_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    worker: str
    hostname: str
    driver_version: str
    simulated: bool
    nvml_up: bool
    gpus: tuple[GpuSnapshot, ...] = ()
    samples_total: int = 0
    sample_duration: float = 0.0
    timestamp: float = 0.0
    errors: dict[tuple[str, str], int] = field(default_factory=dict)
    cluster: str | None = None  # the dask_cluster label; None: not known, not exported
    peak_window: float = 0.0  # seconds: the trailing window of every GPU's peak this round
    interval: float = 0.0  # seconds between sampling rounds


@dataclass
class _GpuState:
    """What a GPU carries from one sample to the next: survives the GPU going away."""

    peak: WindowMax
    busy_seconds: float = 0.0
    last_t: float | None = None
    energy: EnergyCounter = field(default_factory=EnergyCounter)
    active_seconds: dict[str, float] = field(default_factory=dict)
    rounds_to_energy: int = 0  # rounds until NVML's energy counter is read again

    def gap(self) -> None:
        """The GPU or the driver was away: credit nothing for it, read energy when back."""
        self.last_t = None
        self.energy.gap()
        self.rounds_to_energy = 0


class Sampler:
    def __init__(
        self,
        source: GpuSource,
        target: Callable[[], Target],
        interval: float = 0.5,
        peak_window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        energy_interval: float = 5.0,
        scrapes: ScrapeLog | None = None,
        longest_window: float | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        if peak_window < interval:
            raise ValueError("peak window must be at least one sampling interval")
        self.source = source
        self.interval = interval
        self.peak_window = peak_window  # the shortest; with ``scrapes``, it follows them
        self.longest_window = max(peak_window, longest_window or peak_window)
        self.scrapes = scrapes
        self._energy_every = max(1, round(energy_interval / interval))  # in rounds
        self._target = target
        self._clock = clock
        self._wall = wall  # unix time, that of the stamps and the snapshots
        self._states: dict[str, _GpuState] = {}
        self._devices: tuple[tuple[GpuRef, DeviceInfo], ...] | None = None
        self._devices_for: Target | None = None
        self._driver = ""
        self._nvml_up = False
        self._retry_at = 0.0
        self._retry_delay = interval
        self._samples = 0
        self._warned: set[str] = set()
        self.last_error = ""  # why NVML is unavailable, for a sidecar's exit message
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        t = target()
        self.snapshot = Snapshot(t.worker, t.hostname, "", source.simulated, False,
                                 cluster=t.cluster, peak_window=peak_window,
                                 interval=interval)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dask-metrics-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.source.close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # never let the thread die: a worker must outlive its exporter
                logger.exception("unexpected error while sampling GPUs")
            next_at += self.interval
            delay = next_at - self._clock()
            if delay < 0:  # fell behind (a slow NVML call): skip missed slots, don't burst
                next_at = self._clock()
                delay = 0
            self._stop.wait(delay)

    # -- one round -------------------------------------------------------------------------
    def window(self) -> float:
        """This round's peak window: at least ``peak_window``, and long enough to reach
        one sampling interval past every recent scraper's previous scrape (the sample its
        page held may be that much older), up to ``longest_window``."""
        if self.scrapes is None:
            return self.peak_window
        need = self.scrapes.longest_gap(self.longest_window) + self.interval
        return min(max(need, self.peak_window), self.longest_window)

    def sample_once(self) -> Snapshot:
        started = self._clock()
        target = self._target()
        window = self.window()
        gpus: list[GpuSnapshot] = []
        if self._ensure_source(started):
            try:
                for ref, info in self._resolve(target):
                    gpus.append(self._sample_gpu(ref, info, target, window))
            except SourceUnavailable as exc:
                self._lose_source(str(exc), started)
                gpus = []
        self._samples += 1
        self.snapshot = Snapshot(
            worker=target.worker,
            hostname=target.hostname,
            driver_version=self._driver,
            simulated=self.source.simulated,
            nvml_up=self._nvml_up,
            gpus=tuple(gpus),
            samples_total=self._samples,
            sample_duration=self._clock() - started,
            timestamp=self._wall(),
            errors=dict(self.source.errors),
            cluster=target.cluster,
            peak_window=window,
            interval=self.interval,
        )
        return self.snapshot

    def _ensure_source(self, now: float) -> bool:
        if self._nvml_up:
            return True
        if now < self._retry_at:
            return False
        try:
            self.source.start()
            self._driver = self.source.driver_version()
        except SourceUnavailable as exc:
            self._lose_source(str(exc), now)
            return False
        self._nvml_up = True
        self._retry_delay = self.interval
        self._devices = None
        if "source" in self._warned:
            logger.warning("NVML is available again")
            self._warned.discard("source")
        return True

    def _lose_source(self, message: str, now: float) -> None:
        self._nvml_up = False
        self.last_error = message
        self._devices = None
        for state in self._states.values():
            state.gap()
        if "source" not in self._warned:
            logger.warning("%s; retrying every %.0f s at most", message, RETRY_MAX_SECONDS)
            self._warned.add("source")
        self._retry_at = now + self._retry_delay
        self._retry_delay = min(self._retry_delay * 2, RETRY_MAX_SECONDS)

    def _resolve(self, target: Target) -> tuple[tuple[GpuRef, DeviceInfo], ...]:
        """Map the target's GPU spec to devices; redone only when the target changes."""
        if self._devices is not None and self._devices_for == target:
            return self._devices
        selection = select(target.gpus, self.source.candidates())
        if selection.unmatched is not None and selection.unmatched not in self._warned:
            self._warned.add(selection.unmatched)
            logger.warning("GPU %r is not visible to NVML; sampling only the %d GPU(s) before it",
                           selection.unmatched, len(selection.devices))
        self._devices = tuple(
            (GpuRef(i, c.uuid), self._describe(c.uuid)) for i, c in enumerate(selection.devices)
        )
        self._devices_for = target
        self._note_without_gpm()
        return self._devices

    def _note_without_gpm(self) -> None:
        """Say once per GPU why it has no SM or tensor activity series."""
        for ref, info in self._devices or ():
            if not info.gpm and f"gpm:{ref.uuid}" not in self._warned:
                self._warned.add(f"gpm:{ref.uuid}")
                logger.info("GPU %d (%s%s) does not offer NVML's GPM counters (Hopper or newer "
                            "needed): no SM, tensor or DRAM activity series for it", ref.index,
                            f"{info.name}, " if info.name else "", ref.uuid)

    def _describe(self, uuid: str) -> DeviceInfo:
        try:
            return self.source.describe(uuid)
        except DeviceFailed:  # lost while being listed: sampled (and found down) all the same
            return DeviceInfo(uuid, "", "")

    def _sample_gpu(self, ref: GpuRef, info: DeviceInfo, target: Target, window: float
                    ) -> GpuSnapshot:
        state = self._states.get(ref.uuid)
        if state is None:
            state = self._states[ref.uuid] = _GpuState(WindowMax(self.longest_window))
        read_energy = state.rounds_to_energy <= 0
        try:
            reading = self.source.read(ref.uuid, target.pids, energy=read_energy)
        except DeviceFailed as exc:
            if ref.uuid not in self._warned:
                logger.warning("GPU %d (%s) is not answering: %s", ref.index, ref.uuid, exc)
                self._warned.add(ref.uuid)
            state.gap()  # the gap is not credited as busy or idle time
            return GpuSnapshot(ref, info, False, None, None, state.busy_seconds,
                               active_seconds=dict(state.active_seconds))
        if ref.uuid in self._warned:
            logger.warning("GPU %d (%s) is back", ref.index, ref.uuid)
            self._warned.discard(ref.uuid)
        now = self._clock()
        # NVML utilisation is the busy share of the sample period that just ended, so it
        # weighs the time since the previous sample (a right Riemann sum).
        if state.last_t is not None and reading.utilization is not None:
            state.busy_seconds += reading.utilization * (now - state.last_t)
        state.last_t = now
        state.rounds_to_energy = (self._energy_every if read_energy else state.rounds_to_energy) - 1
        energy = state.energy.update(now, reading.power_watts,
                                     reading.energy_joules if read_energy else None)
        if info.gpm:
            for name in m.GPM_COUNTERS:  # from 0 at the first sample, like busy time
                state.active_seconds[name] = state.active_seconds.get(name, 0.0) + (
                    reading.activity.get(name, 0.0) * reading.activity_seconds)
        reading = replace(reading, energy_joules=energy)
        peak, peak_time, after = None, 0.0, None
        if reading.memory_used is not None:
            peak, peak_time = state.peak.add(now, reading.memory_used, self._wall(), window)
            after = state.peak.after()
        return GpuSnapshot(ref, info, True, reading, peak, state.busy_seconds, peak_time, after,
                           dict(state.active_seconds))
