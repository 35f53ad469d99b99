"""Sampler arithmetic with a deterministic clock: busy-time integral, peaks, lost GPUs and a
driver that comes back. (The same paths run against real pynvml in test_exporter_*.py.)"""

from collections import Counter

import pytest

from dask_metrics.exporter.gpu_source import DeviceFailed, DeviceInfo, Reading, SourceUnavailable
from dask_metrics.exporter.sampler import Sampler
from dask_metrics.exporter.selection import Candidate
from dask_metrics.exporter.target import Target

UUIDS = ["GPU-0000", "GPU-1111"]


class ScriptedSource:
    """A GpuSource whose readings come from plain Python values set by the test."""

    simulated = False

    def __init__(self):
        self.errors = Counter()
        self.util = {u: 0.0 for u in UUIDS}
        self.used = {u: 1.0 for u in UUIDS}
        self.lost: set[str] = set()
        self.available = True
        self.starts = 0
        self.power = {u: 100.0 for u in UUIDS}
        self.counter = {u: 1000.0 for u in UUIDS}  # NVML's energy counter, joules
        self.energy_reads = 0

    def start(self):
        self.starts += 1
        if not self.available:
            raise SourceUnavailable("driver not loaded")

    def close(self):
        pass

    def driver_version(self):
        return "1.0"

    def candidates(self):
        return [Candidate(i, u) for i, u in enumerate(UUIDS)]

    def describe(self, uuid):
        return DeviceInfo(uuid, "Fake", "0000")

    def read(self, uuid, pids, energy=True):
        if not self.available:
            raise SourceUnavailable("driver gone")
        if uuid in self.lost:
            raise DeviceFailed("lost")
        self.energy_reads += energy and uuid == UUIDS[0]
        return Reading(memory_used=self.used[uuid], memory_total=10.0,
                       utilization=self.util[uuid], power_watts=self.power[uuid],
                       energy_joules=self.counter[uuid] if energy else None)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def rig():
    source, clock = ScriptedSource(), Clock()
    sampler = Sampler(source, lambda: Target("w", None), interval=0.5, peak_window=2.0,
                      clock=clock)
    return source, clock, sampler


def step(sampler, clock, dt=0.5):
    clock.t += dt
    return sampler.sample_once()


def test_busy_seconds_is_the_integral_of_utilisation(rig):
    source, clock, sampler = rig
    sampler.sample_once()
    source.util["GPU-0000"] = 1.0
    for _ in range(4):
        step(sampler, clock)  # 2 s at 100 %
    source.util["GPU-0000"] = 0.25
    for _ in range(8):
        snap = step(sampler, clock)  # 4 s at 25 %
    assert snap.gpus[0].busy_seconds == pytest.approx(2.0 + 1.0)
    assert snap.gpus[1].busy_seconds == 0.0


def test_peak_holds_a_spike_for_the_window(rig):
    source, clock, sampler = rig
    sampler.sample_once()
    source.used["GPU-1111"] = 9.0
    step(sampler, clock)
    source.used["GPU-1111"] = 2.0
    snap = step(sampler, clock)
    assert snap.gpus[1].reading.memory_used == 2.0
    assert snap.gpus[1].peak_bytes == 9.0
    for _ in range(4):
        snap = step(sampler, clock)
    assert snap.gpus[1].peak_bytes == 2.0


def test_lost_gpu_is_down_without_values_and_the_gap_is_not_credited(rig):
    source, clock, sampler = rig
    source.util["GPU-0000"] = 1.0
    sampler.sample_once()
    step(sampler, clock)
    source.lost.add("GPU-0000")
    snap = step(sampler, clock, dt=10)
    assert [g.up for g in snap.gpus] == [False, True]
    assert snap.gpus[0].reading is None
    assert snap.gpus[0].busy_seconds == pytest.approx(0.5)
    source.lost.clear()
    snap = step(sampler, clock, dt=10)
    assert snap.gpus[0].up
    assert snap.gpus[0].busy_seconds == pytest.approx(0.5)  # first sample back: no interval
    snap = step(sampler, clock)
    assert snap.gpus[0].busy_seconds == pytest.approx(1.0)


def test_unavailable_driver_is_retried_with_backoff_and_recovers(rig):
    source, clock, sampler = rig
    source.available = False
    snap = sampler.sample_once()
    assert not snap.nvml_up and snap.gpus == ()
    assert "driver not loaded" in sampler.last_error
    starts = source.starts
    step(sampler, clock, dt=0.1)  # before the retry time: no new attempt
    assert source.starts == starts
    source.available = True
    snap = step(sampler, clock, dt=1.0)
    assert snap.nvml_up and len(snap.gpus) == 2


def test_driver_lost_mid_run(rig):
    source, clock, sampler = rig
    assert sampler.sample_once().nvml_up
    source.available = False
    snap = step(sampler, clock)
    assert not snap.nvml_up
    source.available = True
    assert step(sampler, clock, dt=1.0).nvml_up


def energy(snap, gpu=0):
    return snap.gpus[gpu].reading.energy_joules


def test_energy_counter_is_read_every_energy_interval_and_estimated_between(rig):
    """NVML's counter is read every 2 s (4 rounds of 0.5 s); between reads the counter
    advances by power x time; a lost GPU is read again as soon as it is back."""
    source, clock, _ = rig
    sampler = Sampler(source, lambda: Target("w", None), interval=0.5, peak_window=2.0,
                      clock=clock, energy_interval=2.0)
    assert energy(sampler.sample_once()) == 1000.0 and source.energy_reads == 1
    served = [energy(step(sampler, clock)) for _ in range(3)]
    assert served == [1050.0, 1100.0, 1150.0] and source.energy_reads == 1
    source.counter["GPU-0000"] = 1140.0  # the estimate ran ahead of the truth: held
    assert energy(step(sampler, clock)) == 1150.0 and source.energy_reads == 2
    assert energy(step(sampler, clock)) == 1190.0  # the truth plus 0.5 s at 100 W
    assert energy(step(sampler, clock)) == 1240.0
    source.lost.add("GPU-0000")
    step(sampler, clock, dt=30)
    source.lost.clear()
    source.counter["GPU-0000"] = 4000.0
    assert energy(step(sampler, clock, dt=30)) == 4000.0 and source.energy_reads == 3


def test_invalid_settings():
    with pytest.raises(ValueError):
        Sampler(ScriptedSource(), lambda: Target("w", None), interval=1, peak_window=0.5)
