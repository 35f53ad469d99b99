"""The names every part shares, declared once: metric names, types and help, label names,
DAG status values, the idle marker, the scheduler's handler names and the CSV columns.

The exporter and the scheduler preload build their metric families from these specs, the
collector queries these names, ``grafana/generate.py`` writes dashboards with them and
docs/metrics.md is generated from them; tests/test_contract.py fails when a dashboard, an
alert rule, a doc or the code uses a ``dask_gpu_*``/``dask_job_*`` name or a label that is not
declared here.
"""

from __future__ import annotations

import enum

from dask_metrics.metricspec import MetricSpec

# -- label names ---------------------------------------------------------------------------
# Never ``job`` or ``instance``: Prometheus sets those on every scraped series.
WORKER = "worker"  # the Dask worker's name, or its address when it has none; same in every part
GPU = "gpu"  # index among the worker's visible GPUs
UUID = "uuid"  # NVML UUID (GPU-... or MIG-...)
JOB_ID = "job_id"
DAG_ID = "dag_id"
# Which life of the scheduler a job/DAG series is from: its start, unix seconds with
# milliseconds ("1764140000.123"). A restarted scheduler numbers jobs, DAGs and monitor
# sessions from 0 again under the same cluster name; this label keeps the two apart.
SCHEDULER_START = "scheduler_start"
JOB_NAME = "job_name"
CLIENT = "client"
ADDRESS = "address"
PID = "pid"
SIMULATED = "simulated"  # "true" on synthetic GPUs
# Which Dask cluster a series is from: one Prometheus often scrapes many. Not ``cluster``,
# which multi-cluster Prometheus setups use for the Kubernetes cluster. Every series of every
# part carries it; its value is set by one name in all three places below, else a default
# that the scheduler decides and the workers and sidecars learn from it.
DASK_CLUSTER = "dask_cluster"
CLUSTER_OPTION = "--dask-cluster"  # the sidecar's and both preloads' option
CLUSTER_ENV = "DASK_METRICS_CLUSTER"
CLUSTER_CONFIG = "dask-metrics.cluster"  # Dask config key
# Labels that tell Prometheus HA replicas apart (dropped when series are merged).
REPLICA_LABELS = ("prometheus_replica", "replica")
INFO_LABELS = ("name", "pci_bus_id", "driver_version", "hostname", SIMULATED)

# -- scheduler preload: values and handlers -------------------------------------------------
IDLE = -1  # dask_job_current_job/_dag when no DAG is unfinished


class DagStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    ERRED = 3  # a task erred, or a wanted task was cancelled before it finished


class Handler:
    """Scheduler handlers the preload adds: ``client.scheduler.<name>(...)``."""

    MONITOR_START = "dask_metrics_monitor_start"
    MONITOR_STOP = "dask_metrics_monitor_stop"
    MONITOR_STATUS = "dask_metrics_monitor_status"
    MONITOR_SESSIONS = "dask_metrics_monitor_sessions"
    NEW_JOB = "dask_metrics_new_job"
    DAGS = "dask_metrics_dags"
    PROMETHEUS_URL = "dask_metrics_prometheus_url"
    # The cluster's name (the dask_cluster label's value) as a plain string; a scheduler
    # that does not answer it leaves a Monitor unscoped, with a warning.
    CLUSTER = "dask_metrics_cluster"
    # A worker's identity, from a worker plugin added after the worker registered (its
    # startup_information was sent without it).
    IDENTITY = "dask_metrics_worker_identity"
    # Start the scheduler's local Prometheus unless it runs: {"ok", "url", "folder"}.
    LOCAL_PROMETHEUS = "dask_metrics_local_prometheus"


# -- GPU exporter series --------------------------------------------------------------------

GPU_LABELS = (DASK_CLUSTER, WORKER, GPU, UUID)

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
MEMORY_PEAK_TIME = MetricSpec(
    "dask_gpu_memory_peak_timestamp_seconds", "gauge", "seconds", GPU_LABELS,
    "Unix time of the internal sample that set dask_gpu_memory_peak_bytes (the last one at "
    "that value), so a peak is credited to the session, job and DAG it happened in.",
)
MEMORY_NEXT_PEAK = MetricSpec(
    "dask_gpu_memory_next_peak_bytes", "gauge", "bytes", GPU_LABELS,
    "Maximum of memory used after the peak's sample, within the peak window; absent while "
    "the peak is the latest sample. What a large value just before a session or job would "
    "hide of it.",
)
MEMORY_NEXT_PEAK_TIME = MetricSpec(
    "dask_gpu_memory_next_peak_timestamp_seconds", "gauge", "seconds", GPU_LABELS,
    "Unix time of the internal sample that set dask_gpu_memory_next_peak_bytes.",
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
    "Energy consumed since the driver was loaded: NVML's total energy consumption, read "
    "every --energy-interval and advanced by power x time in between.",
)
TEMPERATURE = MetricSpec(
    "dask_gpu_temperature_celsius", "gauge", "celsius", GPU_LABELS,
    "GPU core temperature.",
)
SM_CLOCK = MetricSpec(
    "dask_gpu_sm_clock_hertz", "gauge", "hertz", GPU_LABELS,
    "Current streaming-multiprocessor clock.",
)
# What the GPU's own counters say (NVML's GPM: Hopper and newer), unlike "utilisation",
# which is the share of time any kernel ran however few SMs it used.
_GPM = " NVML GPM mean over the last sampling interval (Hopper and newer; on MIG, the MIG " \
    "device's GPU instance); absent where GPM is not supported."


def _gpm_ratio(name: str, meaning: str) -> MetricSpec:
    """A GPM activity: a ratio gauge of every GPU that offers GPM."""
    return MetricSpec(name, "gauge", "ratio", GPU_LABELS, meaning + _GPM)


SM_ACTIVE = _gpm_ratio(
    "dask_gpu_sm_active_ratio",
    "Share of the SMs that had a warp resident, averaged over time (0-1).")
SM_OCCUPANCY = _gpm_ratio(
    "dask_gpu_sm_occupancy_ratio",
    "Resident warps against the SMs' maximum (0-1).")
TENSOR_ACTIVE = _gpm_ratio(
    "dask_gpu_tensor_active_ratio",
    "Share of time the SMs' tensor cores were busy, any precision (0-1).")
DRAM_ACTIVE = _gpm_ratio(
    "dask_gpu_dram_active_ratio",
    "Device memory bandwidth used against its maximum (0-1).")
FP64_ACTIVE = _gpm_ratio(
    "dask_gpu_fp64_active_ratio",
    "Share of time the SMs did non-tensor FP64 math (0-1).")
FP32_ACTIVE = _gpm_ratio(
    "dask_gpu_fp32_active_ratio",
    "Share of time the SMs did non-tensor FP32 math (0-1).")
FP16_ACTIVE = _gpm_ratio(
    "dask_gpu_fp16_active_ratio",
    "Share of time the SMs did non-tensor FP16 math (0-1).")
SM_ACTIVE_SECONDS = MetricSpec(
    "dask_gpu_sm_active_seconds_total", "counter", "seconds", GPU_LABELS,
    "Integral of dask_gpu_sm_active_ratio over time, from every GPM interval: rate() over "
    "any window is the mean SM activity, whatever the scrape interval.",
)
TENSOR_ACTIVE_SECONDS = MetricSpec(
    "dask_gpu_tensor_active_seconds_total", "counter", "seconds", GPU_LABELS,
    "Integral of dask_gpu_tensor_active_ratio over time, from every GPM interval: rate() "
    "over any window is the mean tensor activity.",
)
GPM_ACTIVITIES = (SM_ACTIVE, SM_OCCUPANCY, TENSOR_ACTIVE, DRAM_ACTIVE, FP64_ACTIVE,
                  FP32_ACTIVE, FP16_ACTIVE)
# The activities whose integral is a counter too (what per-job means are read from).
GPM_COUNTERS = {SM_ACTIVE.name: SM_ACTIVE_SECONDS, TENSOR_ACTIVE.name: TENSOR_ACTIVE_SECONDS}
PROCESS_MEMORY = MetricSpec(
    "dask_gpu_process_memory_used_bytes", "gauge", "bytes", (*GPU_LABELS, "pid"),
    "GPU memory used by a process of this worker, when its pid is known and visible to NVML.",
)

EXPORTER_LABELS = (DASK_CLUSTER, WORKER)
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
EXPORTER_PEAK_WINDOW = MetricSpec(
    "dask_gpu_exporter_peak_window_seconds", "gauge", "seconds", EXPORTER_LABELS,
    "The trailing window of dask_gpu_memory_peak_bytes at this scrape: it follows the gaps "
    "between scrapes, from --peak-window up to --peak-window-max, so readers need "
    "not be told it.",
)
EXPORTER_SAMPLE_INTERVAL = MetricSpec(
    "dask_gpu_exporter_sample_interval_seconds", "gauge", "seconds", EXPORTER_LABELS,
    "How often the GPUs are sampled (--interval): a peak window ending at a scrape reaches "
    "back at most this much further than the window.",
)
EXPORTER_NVML_ERRORS = MetricSpec(
    "dask_gpu_exporter_nvml_errors_total", "counter", "", (*EXPORTER_LABELS, "call", "error"),
    "NVML calls that failed, by call and NVML error (unsupported calls are not errors).",
)

PER_GPU_VALUES = (
    MEMORY_USED, MEMORY_TOTAL, MEMORY_RESERVED, MEMORY_PEAK, MEMORY_PEAK_TIME,
    MEMORY_NEXT_PEAK, MEMORY_NEXT_PEAK_TIME, UTILIZATION, BUSY, MEMORY_BANDWIDTH, POWER, ENERGY,
    TEMPERATURE, SM_CLOCK, *GPM_ACTIVITIES, *GPM_COUNTERS.values(),
)
GPU_SPECS: list[MetricSpec] = [
    INFO, UP, *PER_GPU_VALUES, PROCESS_MEMORY,
    EXPORTER_NVML_UP, EXPORTER_SAMPLES, EXPORTER_SAMPLE_DURATION, EXPORTER_LAST_SAMPLE,
    EXPORTER_PEAK_WINDOW, EXPORTER_SAMPLE_INTERVAL, EXPORTER_NVML_ERRORS,
]


# -- scheduler preload series ---------------------------------------------------------------

CURRENT_JOB = MetricSpec(
    "dask_job_current_job",
    "gauge",
    "",
    (DASK_CLUSTER, SCHEDULER_START),
    "Job id of the oldest unfinished DAG; -1 when the cluster is idle.",
)
CURRENT_DAG = MetricSpec(
    "dask_job_current_dag",
    "gauge",
    "",
    (DASK_CLUSTER, SCHEDULER_START),
    "DAG id (within its job) of the oldest unfinished DAG; -1 when the cluster is idle.",
)
WORKER_TASKS = MetricSpec(
    "dask_job_worker_tasks",
    "gauge",
    "",
    (DASK_CLUSTER, SCHEDULER_START, WORKER, JOB_ID, DAG_ID),
    "Tasks of this DAG processing on this worker now; present only while above 0.",
)
WORKER_DAG_START = MetricSpec(
    "dask_job_worker_dag_start_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START, WORKER, JOB_ID, DAG_ID),
    "Unix time the first task of this DAG began processing on this worker: the scheduler's "
    "own time, so a DAG shorter than a scrape still has its edges. Exported until the DAG "
    "finished finished-dag-ttl ago.",
)
WORKER_DAG_END = MetricSpec(
    "dask_job_worker_dag_end_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START, WORKER, JOB_ID, DAG_ID),
    "Unix time the last task of this DAG stopped processing on this worker; absent while one "
    "processes there.",
)
DAG_INFO = MetricSpec(
    "dask_job_dag_info",
    "gauge",
    "",
    (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID, JOB_NAME, CLIENT),
    "Always 1 while the DAG is known; job_name is the span name or the client name.",
)
DAG_STATUS = MetricSpec(
    "dask_job_dag_status",
    "gauge",
    "",
    (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID),
    "0 waiting, 1 running, 2 finished, 3 erred (a task erred or a result was cancelled).",
)
DAG_SUBMITTED = MetricSpec(
    "dask_job_dag_submitted_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID),
    "Unix time the scheduler received the DAG: its edges are the scheduler's own times, "
    "not the scrape that first saw it.",
)
DAG_STARTED = MetricSpec(
    "dask_job_dag_started_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID),
    "Unix time the DAG's first task started processing; absent until then.",
)
DAG_FINISHED = MetricSpec(
    "dask_job_dag_finished_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID),
    "Unix time the DAG finished or erred (dask_job_dag_status says which); absent until then.",
)
DAGS_COMPLETED = MetricSpec(
    "dask_job_dags_completed_total",
    "counter",
    "",
    (DASK_CLUSTER, "status"),
    "DAGs that reached a final status (finished or erred) since the scheduler started.",
)
DAGS_UNSCRAPED = MetricSpec(
    "dask_job_dags_unscraped_total",
    "counter",
    "",
    (DASK_CLUSTER,),
    "Finished DAGs forgotten before any scrape saw them (more than max-unscraped-dags "
    "finished between two scrapes): they are in no dask_job_dag_* series.",
)
SCHEDULER_STARTED = MetricSpec(
    "dask_job_scheduler_start_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER,),
    "Unix time this scheduler started exporting (its scheduler_start label's value): a "
    "change is a restart, after which job, DAG and session ids count from 0 again.",
)
MONITOR_START = MetricSpec(
    "dask_job_monitor_start_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START),
    "Unix time the last monitor session started; absent before the first session.",
)
MONITOR_STOP = MetricSpec(
    "dask_job_monitor_stop_timestamp_seconds",
    "gauge",
    "seconds",
    (DASK_CLUSTER, SCHEDULER_START),
    "Unix time the last monitor session stopped; 0 while it runs.",
)
WORKER_GPU_INFO = MetricSpec(
    "dask_job_worker_gpu_info",
    "gauge",
    "",
    (DASK_CLUSTER, "worker", "address", "gpu", "uuid"),
    "Always 1: a GPU of a worker, from the worker preload; one uuid on two workers is shared.",
)
PLUGIN_ERRORS = MetricSpec(
    "dask_job_plugin_errors_total",
    "counter",
    "",
    (DASK_CLUSTER, "hook"),
    "Scheduler-plugin hooks that raised; the scheduler carried on without that update.",
)

# -- scheduler preload: where the time went -----------------------------------------------
# Dask's fine performance metrics, re-exported: Dask keeps them in memory and shows them on
# its dashboard only. One counter family per unit, the unit in the name; units Dask records
# beyond seconds and bytes (custom ``context_meter``/``digest_metric`` units) get a family of
# their own from activity_spec(). dag_id is "" where Dask's spans cannot tell DAGs apart.
PREFIX = "prefix"  # Dask task prefix (the function's name); "other" past the per-job cap
ACTIVITY = "activity"  # thread-cpu, thread-noncpu, idle, disk-read, ..., or a custom label
CONTEXT = "context"  # gather-dep, get-data, memory-monitor: the cluster-wide contexts
ACTIVITY_LABELS = (DASK_CLUSTER, SCHEDULER_START, JOB_ID, DAG_ID, PREFIX, ACTIVITY)
CLUSTER_ACTIVITY_LABELS = (DASK_CLUSTER, CONTEXT, ACTIVITY)
ACTIVITY_FAMILY = "dask_job_activity_"  # + unit + "_total"
CLUSTER_ACTIVITY_FAMILY = "dask_job_cluster_activity_"  # + unit + "_total"
OTHER_PREFIX = "other"


def safe_unit(unit: str) -> str:
    """A Dask unit as a metric-name part: lower case, [a-z0-9_] only, never empty, never
    ending in ``total`` (``<unit>_total`` would end in ``_total_total``, which
    prometheus_client folds into the ``<unit>`` family: ``seconds_total`` into seconds)."""
    out = "".join(c if c.isascii() and c.isalnum() else "_" for c in str(unit).lower())
    out = "_".join(part for part in out.split("_") if part) or "unitless"
    return f"{out}_unit" if out.rsplit("_", 1)[-1] == "total" else out


def activity_spec(unit: str) -> MetricSpec:
    """The per-job counter family of one Dask unit (``seconds``, ``bytes``, a custom one)."""
    u = safe_unit(unit)
    return MetricSpec(
        f"{ACTIVITY_FAMILY}{u}_total", "counter", u, ACTIVITY_LABELS,
        f"Dask fine performance metric in {u}, per job, DAG (where spans tell), task prefix "
        "and activity (Dask's execute context).",
    )


def cluster_activity_spec(unit: str) -> MetricSpec:
    """The cluster-wide counter family of one unit: gather-dep, get-data, memory-monitor."""
    u = safe_unit(unit)
    return MetricSpec(
        f"{CLUSTER_ACTIVITY_FAMILY}{u}_total", "counter", u, CLUSTER_ACTIVITY_LABELS,
        f"Dask fine performance metric in {u} outside task execution, cluster-wide, per "
        "context (gather-dep, get-data, memory-monitor) and activity.",
    )


ACTIVITY_SECONDS = activity_spec("seconds")
ACTIVITY_BYTES = activity_spec("bytes")
CLUSTER_ACTIVITY_SECONDS = cluster_activity_spec("seconds")
CLUSTER_ACTIVITY_BYTES = cluster_activity_spec("bytes")

# Each worker's resources, from the heartbeats the scheduler already receives.
WORKER_LABELS = (DASK_CLUSTER, WORKER)
WORKER_MEMORY = MetricSpec(
    "dask_job_worker_memory_bytes", "gauge", "bytes", WORKER_LABELS,
    "Process memory of the worker (managed + unmanaged), from its heartbeat.",
)
WORKER_MANAGED_MEMORY = MetricSpec(
    "dask_job_worker_managed_memory_bytes", "gauge", "bytes", WORKER_LABELS,
    "Managed memory: bytes of task results held in the worker's memory; unmanaged is "
    "dask_job_worker_memory_bytes minus this.",
)
WORKER_SPILLED = MetricSpec(
    "dask_job_worker_spilled_bytes", "gauge", "bytes", WORKER_LABELS,
    "Bytes of task results the worker has spilled to disk.",
)
WORKER_MEMORY_LIMIT = MetricSpec(
    "dask_job_worker_memory_limit_bytes", "gauge", "bytes", WORKER_LABELS,
    "The worker's memory limit; 0 when it has none.",
)
WORKER_CPU = MetricSpec(
    "dask_job_worker_cpu_ratio", "gauge", "ratio", WORKER_LABELS,
    "CPU use of the worker process in cores, as its heartbeat reports it (1 = one core busy).",
)
WORKER_THREADS = MetricSpec(
    "dask_job_worker_threads", "gauge", "", WORKER_LABELS,
    "Threads the worker runs tasks on.",
)
WORKER_EXECUTING = MetricSpec(
    "dask_job_worker_executing_tasks", "gauge", "", WORKER_LABELS,
    "Tasks executing on the worker now.",
)
WORKER_PROCESSING = MetricSpec(
    "dask_job_worker_processing_tasks", "gauge", "", WORKER_LABELS,
    "Tasks the scheduler has assigned to the worker and not seen finish (executing or ready).",
)
WORKER_OCCUPANCY = MetricSpec(
    "dask_job_worker_occupancy_seconds", "gauge", "seconds", WORKER_LABELS,
    "Expected run time of the tasks processing on the worker (Dask's occupancy).",
)
WORKER_STORED = MetricSpec(
    "dask_job_worker_stored_bytes", "gauge", "bytes", WORKER_LABELS,
    "Bytes of task results the scheduler knows the worker holds (memory and disk).",
)
# RAPIDS workers usually run an RMM pool, which NVML reports as used from the first task on;
# Dask's worker heartbeats carry the pool and what is allocated from it when rmm is importable.
WORKER_RMM_USED = MetricSpec(
    "dask_job_worker_rmm_used_bytes", "gauge", "bytes", WORKER_LABELS,
    "GPU memory allocated through RMM on the worker's device, from its heartbeat ('rmm-used'); "
    "0 unless the resource tracks allocations (dask-cuda --rmm-track-allocations); absent "
    "without rmm.",
)
WORKER_RMM_POOL = MetricSpec(
    "dask_job_worker_rmm_pool_bytes", "gauge", "bytes", WORKER_LABELS,
    "Size of the worker's RMM pool (or RMM use, when larger), from its heartbeat "
    "('rmm-total'); absent without rmm.",
)
# What ran where, for GPU time per task prefix: sampled by the same scrapes as the GPUs.
WORKER_PREFIX_TASKS = MetricSpec(
    "dask_job_worker_prefix_tasks", "gauge", "",
    (DASK_CLUSTER, SCHEDULER_START, WORKER, JOB_ID, DAG_ID, PREFIX),
    "Tasks of this DAG and task prefix executing on this worker now; present only while "
    "above 0.",
)
WORKER_RESOURCE_SPECS = [
    WORKER_MEMORY, WORKER_MANAGED_MEMORY, WORKER_SPILLED, WORKER_MEMORY_LIMIT, WORKER_CPU,
    WORKER_THREADS, WORKER_EXECUTING, WORKER_PROCESSING, WORKER_OCCUPANCY, WORKER_STORED,
    WORKER_RMM_USED, WORKER_RMM_POOL,
]

SCHEDULER_SPECS: list[MetricSpec] = [
    CURRENT_JOB,
    CURRENT_DAG,
    WORKER_TASKS,
    WORKER_DAG_START,
    WORKER_DAG_END,
    DAG_INFO,
    DAG_STATUS,
    DAG_SUBMITTED,
    DAG_STARTED,
    DAG_FINISHED,
    DAGS_COMPLETED,
    DAGS_UNSCRAPED,
    SCHEDULER_STARTED,
    MONITOR_START,
    MONITOR_STOP,
    WORKER_GPU_INFO,
    PLUGIN_ERRORS,
    ACTIVITY_SECONDS,
    ACTIVITY_BYTES,
    CLUSTER_ACTIVITY_SECONDS,
    CLUSTER_ACTIVITY_BYTES,
    *WORKER_RESOURCE_SPECS,
    WORKER_PREFIX_TASKS,
]

SPECS: list[MetricSpec] = [*GPU_SPECS, *SCHEDULER_SPECS]

# -- CSV files ------------------------------------------------------------------------------
# The metric columns, as named by the original dask-metrics (first three) and since, and the
# series each one reads; the unit conversions live in dask_metrics.collector.model.columns.
CSV_METRICS: dict[str, str] = {
    "total-mem": MEMORY_USED.name,
    "mem-util": MEMORY_USED.name,
    "compute-util": UTILIZATION.name,
    "peak-mem": MEMORY_PEAK.name,
    "mem-bw-util": MEMORY_BANDWIDTH.name,
    "power": POWER.name,
    "temperature": TEMPERATURE.name,
    "sm-clock": SM_CLOCK.name,
    "energy": ENERGY.name,
}
# GPM activity columns: a default export adds those with data in its range (Hopper and newer).
ACTIVITY_CSV_METRICS: dict[str, str] = {
    "sm-active": SM_ACTIVE.name,
    "sm-occupancy": SM_OCCUPANCY.name,
    "tensor-active": TENSOR_ACTIVE.name,
    "dram-active": DRAM_ACTIVE.name,
    "fp64-active": FP64_ACTIVE.name,
    "fp32-active": FP32_ACTIVE.name,
    "fp16-active": FP16_ACTIVE.name,
}
# GPU columns an export writes only when asked for by name: counters whose increase between
# two rows is what a row adds (the session report reads them).
COUNTER_CSV_METRICS: dict[str, str] = {
    "busy-seconds": BUSY.name,
    "sm-active-seconds": SM_ACTIVE_SECONDS.name,
    "tensor-active-seconds": TENSOR_ACTIVE_SECONDS.name,
}
# Columns from the worker's resources (per worker, not per GPU: joined to each of the
# worker's GPU samples as-of, like job and dag).
WORKER_CSV_METRICS: dict[str, str] = {
    "worker-mem": WORKER_MEMORY.name,
    "worker-spilled": WORKER_SPILLED.name,
    "worker-cpu": WORKER_CPU.name,
    "worker-tasks": WORKER_EXECUTING.name,
    "rmm-used": WORKER_RMM_USED.name,  # a default export adds these two where they have data
    "rmm-pool": WORKER_RMM_POOL.name,
}
# Key columns of the tidy layout, before the metric columns; the seed layout's (the original
# tool's worker_<i>.csv files).
TIDY_KEYS = ("timestamp", "time", "worker", "gpu", "uuid", "job", "dag", "worker_job",
             "worker_dag")
SEED_KEYS = ("job", "dag", "timestamp")

# Files of every export beside the per-worker CSVs, and their columns.
ACTIVITIES_CSV = "activities.csv"
# scheduler_start: the scheduler life a job id is of (ids count from 0 in each; "" from a
# preload older than the label), as in the series' scheduler_start label.
ACTIVITY_COLUMNS = ("job", "job_name", "dag", "prefix", "activity", "unit", "value",
                    "scheduler_start")
GPU_BY_PREFIX_CSV = "gpu_by_prefix.csv"
GPU_BY_PREFIX_COLUMNS = ("job", "job_name", "dag", "prefix", "gpu_seconds", "peak_mem",
                         "energy", "scheduler_start")
JOBS_CSV = "jobs.csv"
# first_seen/last_seen: seconds since the export's start, like the per-worker ``timestamp``;
# the *_time columns: the same times in RFC 3339, like their ``time``.
JOBS_COLUMNS = ("job", "job_name", "dag", "client", "status", "first_seen", "last_seen",
                "first_seen_time", "last_seen_time", "scheduler_start")
