"""A prometheus_client custom collector that turns sampler snapshots into series."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from dask_metrics import contract as m
from dask_metrics.exporter.gpu_source import Reading
from dask_metrics.exporter.sampler import Snapshot

# Each per-GPU value series and how to read it from a sample.
_VALUES: tuple[tuple[m.MetricSpec, Callable[[Reading], float | None]], ...] = (
    (m.MEMORY_USED, lambda r: r.memory_used),
    (m.MEMORY_TOTAL, lambda r: r.memory_total),
    (m.MEMORY_RESERVED, lambda r: r.memory_reserved),
    (m.UTILIZATION, lambda r: r.utilization),
    (m.MEMORY_BANDWIDTH, lambda r: r.memory_bandwidth),
    (m.POWER, lambda r: r.power_watts),
    (m.ENERGY, lambda r: r.energy_joules),
    (m.TEMPERATURE, lambda r: r.temperature_celsius),
    (m.SM_CLOCK, lambda r: r.sm_clock_hertz),
)


_ACTIVITY = {spec.name: spec for spec in m.GPM_ACTIVITIES}


class GpuCollector(Collector):
    """Serves the latest snapshot of one or more samplers (several workers may share a
    process, e.g. ``LocalCluster(processes=False)``, and so one registry)."""

    def __init__(self, snapshots: Callable[[], Iterable[Snapshot]]) -> None:
        self._snapshots = snapshots

    def describe(self) -> Iterator[Metric]:
        # Names only, so the registry can refuse a second collector of the same series.
        for spec in m.GPU_SPECS:
            yield spec.family()

    def collect(self) -> Iterator[Metric]:
        families = {spec.name: spec.family() for spec in m.GPU_SPECS}
        for snap in self._snapshots():
            _add_snapshot(families, snap)
        yield from families.values()


def _add_snapshot(f: dict[str, Metric], snap: Snapshot) -> None:
    if snap.cluster is None:
        return  # the cluster is not known yet: no series rather than a wrong dask_cluster
    cluster = snap.cluster

    def add(spec: m.MetricSpec, labels: list[str], value: float) -> None:
        f[spec.name].add_metric([cluster, *labels], value)  # the one place it is added

    w = snap.worker
    add(m.EXPORTER_NVML_UP, [w], 1.0 if snap.nvml_up else 0.0)
    add(m.EXPORTER_SAMPLES, [w], snap.samples_total)
    add(m.EXPORTER_SAMPLE_DURATION, [w], snap.sample_duration)
    if snap.timestamp:
        add(m.EXPORTER_LAST_SAMPLE, [w], snap.timestamp)
    if snap.peak_window:
        add(m.EXPORTER_PEAK_WINDOW, [w], snap.peak_window)
    if snap.interval:
        add(m.EXPORTER_SAMPLE_INTERVAL, [w], snap.interval)
    for (call, error), count in sorted(snap.errors.items()):
        add(m.EXPORTER_NVML_ERRORS, [w, call, error], count)
    simulated = "true" if snap.simulated else "false"
    for g in snap.gpus:
        labels = [w, str(g.ref.index), g.ref.uuid]
        add(m.INFO, [*labels, g.info.name, g.info.pci_bus_id, snap.driver_version,
                     snap.hostname, simulated], 1.0)
        add(m.UP, labels, 1.0 if g.up else 0.0)
        add(m.BUSY, labels, g.busy_seconds)
        for name, seconds in g.active_seconds.items():
            add(m.GPM_COUNTERS[name], labels, seconds)
        if g.reading is None:
            continue  # a GPU that did not answer: no stale values
        for spec, value_of in _VALUES:
            value = value_of(g.reading)
            if value is not None:
                add(spec, labels, value)
        if g.peak_bytes is not None:
            add(m.MEMORY_PEAK, labels, g.peak_bytes)
            if g.peak_time:
                add(m.MEMORY_PEAK_TIME, labels, g.peak_time)
            if g.next_peak is not None:
                add(m.MEMORY_NEXT_PEAK, labels, g.next_peak[0])
                add(m.MEMORY_NEXT_PEAK_TIME, labels, g.next_peak[1])
        for name, value in g.reading.activity.items():
            add(_ACTIVITY[name], labels, value)
        for pid, used in sorted(g.reading.processes.items()):
            add(m.PROCESS_MEMORY, [*labels, str(pid)], used)
