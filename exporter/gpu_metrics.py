"""The GPU exporter's series, declared once (see docs/metrics.md, generated from here)."""

from __future__ import annotations

from exporter.metricspec import MetricSpec

GPU_LABELS = ("worker", "gpu", "uuid")

INFO = MetricSpec(
    "dask_gpu_info", "gauge", "", (*GPU_LABELS, "name", "pci_bus_id", "driver_version",
                                   "hostname", "simulated"),
    "Always 1; identifies a GPU of a Dask worker. simulated=\"true\" marks synthetic GPUs.",
)
UP = MetricSpec(
    "dask_gpu_up", "gauge", "", GPU_LABELS,
    "1 when the last sample of this GPU succeeded, 0 when it failed (GPU lost, driver error).",
)
MEMORY_USED = MetricSpec(
    "dask_gpu_memory_used_bytes", "gauge", "bytes", GPU_LABELS,
    "GPU memory in use (NVML memory info, v2 where supported: excludes reserved memory).",
)
MEMORY_TOTAL = MetricSpec(
    "dask_gpu_memory_total_bytes", "gauge", "bytes", GPU_LABELS,
    "GPU memory capacity.",
)
MEMORY_RESERVED = MetricSpec(
    "dask_gpu_memory_reserved_bytes", "gauge", "bytes", GPU_LABELS,
    "GPU memory reserved by the driver and firmware (NVML memory info v2 only).",
)
MEMORY_PEAK = MetricSpec(
    "dask_gpu_memory_peak_bytes", "gauge", "bytes", GPU_LABELS,
    "Maximum of memory used over the trailing peak window, from every internal sample, so "
    "spikes between two scrapes are not lost.",
)
UTILIZATION = MetricSpec(
    "dask_gpu_utilization_ratio", "gauge", "ratio", GPU_LABELS,
    "Share of the last NVML sample period during which a kernel ran (0-1).",
)
BUSY = MetricSpec(
    "dask_gpu_busy_seconds_total", "counter", "seconds", GPU_LABELS,
    "Integral of utilisation over time; rate() over any window is the mean utilisation.",
)
MEMORY_BANDWIDTH = MetricSpec(
    "dask_gpu_memory_bandwidth_utilization_ratio", "gauge", "ratio", GPU_LABELS,
    "Share of time device memory was read or written (NVML 'memory' utilisation), "
    "not memory capacity (0-1).",
)
POWER = MetricSpec(
    "dask_gpu_power_watts", "gauge", "watts", GPU_LABELS,
    "Power draw of the GPU board.",
)
ENERGY = MetricSpec(
    "dask_gpu_energy_joules_total", "counter", "joules", GPU_LABELS,
    "Energy consumed since the driver was loaded (NVML total energy consumption).",
)
TEMPERATURE = MetricSpec(
    "dask_gpu_temperature_celsius", "gauge", "celsius", GPU_LABELS,
    "GPU core temperature.",
)
SM_CLOCK = MetricSpec(
    "dask_gpu_sm_clock_hertz", "gauge", "hertz", GPU_LABELS,
    "Current streaming-multiprocessor clock.",
)
PROCESS_MEMORY = MetricSpec(
    "dask_gpu_process_memory_used_bytes", "gauge", "bytes", (*GPU_LABELS, "pid"),
    "GPU memory used by a process of this worker, when its pid is known and visible to NVML.",
)

EXPORTER_LABELS = ("worker",)
EXPORTER_NVML_UP = MetricSpec(
    "dask_gpu_exporter_nvml_up", "gauge", "", EXPORTER_LABELS,
    "1 when NVML is initialised (or GPUs are simulated), 0 while it is unavailable.",
)
EXPORTER_SAMPLES = MetricSpec(
    "dask_gpu_exporter_samples_total", "counter", "", EXPORTER_LABELS,
    "Sampling rounds completed.",
)
EXPORTER_SAMPLE_DURATION = MetricSpec(
    "dask_gpu_exporter_sample_duration_seconds", "gauge", "seconds", EXPORTER_LABELS,
    "Duration of the last sampling round over all GPUs.",
)
EXPORTER_LAST_SAMPLE = MetricSpec(
    "dask_gpu_exporter_last_sample_timestamp_seconds", "gauge", "seconds", EXPORTER_LABELS,
    "Unix time of the last completed sampling round.",
)
EXPORTER_NVML_ERRORS = MetricSpec(
    "dask_gpu_exporter_nvml_errors_total", "counter", "", (*EXPORTER_LABELS, "call", "error"),
    "NVML calls that failed, by call and NVML error (unsupported calls are not errors).",
)

PER_GPU_VALUES = (
    MEMORY_USED, MEMORY_TOTAL, MEMORY_RESERVED, MEMORY_PEAK, UTILIZATION, BUSY,
    MEMORY_BANDWIDTH, POWER, ENERGY, TEMPERATURE, SM_CLOCK,
)
SPECS: list[MetricSpec] = [
    INFO, UP, *PER_GPU_VALUES, PROCESS_MEMORY,
    EXPORTER_NVML_UP, EXPORTER_SAMPLES, EXPORTER_SAMPLE_DURATION, EXPORTER_LAST_SAMPLE,
    EXPORTER_NVML_ERRORS,
]
