"""The traces of an export's worker files: each GPU's samples over time and the jobs/DAGs
that ran, read back from the tidy CSV files ``collector export`` writes.

Plots are drawn from the files ``collector export`` writes rather than from Prometheus
directly, so that one export can be plotted again, and a plot shows exactly the numbers a
user finds in the CSV files.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.tables import WorkerTable
from dask_metrics.collector.timespec import format_rfc3339, parse_rfc3339
from dask_metrics.contract import JOBS_CSV

FIXED = ("timestamp", "time", "worker", "gpu", "uuid", "job", "dag", "worker_job", "worker_dag")
NOT_WORKER_FILES = ("workers.csv", JOBS_CSV)


@dataclass(frozen=True)
class Phase:
    """A stretch of time during which one job/DAG ran: shaded on the plots."""

    start: float
    end: float
    job: str
    dag: str


@dataclass
class GpuTrace:
    """One GPU's samples: seconds since the start, and one list per metric column."""

    gpu: str
    uuid: str
    times: list[float] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)

    def capacity(self) -> float | None:
        """Memory capacity in bytes, from a sample with both bytes used and % of capacity."""
        used, percent = self.values.get("total-mem"), self.values.get("mem-util")
        if used is None or percent is None:
            return None
        for u, p in zip(used, percent, strict=True):
            if u is not None and p:
                return u / p * 100
        return None


@dataclass
class WorkerTrace:
    """A worker's file: its GPUs, what ran on it, and what ran on the cluster meanwhile."""

    worker: str
    stem: str  # the CSV file's name without .csv, already safe as a file name
    start: str  # RFC 3339 time of the first row ("" when the file has no rows)
    metrics: list[str]
    gpus: list[GpuTrace]
    phases: list[Phase]  # worker_job / worker_dag
    cluster_phases: list[Phase]  # job / dag, cluster-wide
    gaps_marked: bool = False  # its rows thinned, a stop in its samples a row without values

    def mean(self, metric: str) -> tuple[list[float], list[float | None]]:
        """The metric averaged over the worker's GPUs at each sample time (GPUs without a
        value at that time are left out)."""
        return _combine(self.gpus, metric, average=True)

    def total(self, metric: str) -> tuple[list[float], list[float | None]]:
        """The metric summed over the worker's GPUs at each sample time."""
        return _combine(self.gpus, metric, average=False)


def _combine(gpus: Sequence[GpuTrace], metric: str,
             average: bool) -> tuple[list[float], list[float | None]]:
    """The GPUs' values of ``metric`` summed (or averaged) per sample time, with numpy (the
    cluster page combines every worker's GPUs: half the time of a dict of lists by time)."""
    import numpy as np  # comes with matplotlib; the collector's other commands do without it

    pairs = [(g.times, g.values[metric]) for g in gpus if g.values.get(metric)]
    if not pairs:
        return [], []
    times = np.concatenate([np.asarray(t[: len(v)], dtype=float) for t, v in pairs])
    values = np.concatenate([_floats(v[: len(t)]) for t, v in pairs])
    found, slot = np.unique(times, return_inverse=True)
    known = ~np.isnan(values)
    total = np.bincount(slot, weights=np.where(known, values, 0.0), minlength=len(found))
    count = np.bincount(slot, weights=known, minlength=len(found))
    out = total / np.where(count > 0, count, 1) if average else total
    return found.tolist(), [x if n else None for x, n in zip(out.tolist(), count.tolist(),
                                                             strict=True)]


def _floats(values: Sequence[float | None]) -> Any:
    """A float array of ``values``, NaN where one is missing."""
    import numpy as np

    return np.array([math.nan if v is None else v for v in values], dtype=float)


def phases(samples: Iterable[tuple[float, str, str]]) -> list[Phase]:
    """Stretches of consecutive samples (time, job, dag) with the same non-empty job/DAG.

    A stretch ends at the first sample that shows something else (that is when the change
    became visible), or at its own last sample when nothing follows.
    """
    found: list[Phase] = []
    current: tuple[float, str, str] | None = None
    last = 0.0
    for t, job, dag in sorted(samples, key=lambda s: s[0]):
        if current is not None and (job, dag) != current[1:]:
            found.append(Phase(current[0], t, current[1], current[2]))
            current = None
        if current is None and job:
            current = (t, job, dag)
        last = t
    if current is not None:
        found.append(Phase(current[0], last, current[1], current[2]))
    return found


def _number(text: str) -> float | None:
    return float(text) if text else None


def read_worker_file(path: str | os.PathLike[str]) -> WorkerTrace:
    """One tidy CSV file; CollectorError when it is not one."""
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(header[: len(FIXED)]) != FIXED:
            raise CollectorError(f"{path} is not a tidy CSV file of 'collector export' "
                                 f"(expected the columns {', '.join(FIXED)} first)")
        metrics = header[len(FIXED):]
        gpus: dict[str, GpuTrace] = {}
        mine: list[tuple[float, str, str]] = []
        cluster: list[tuple[float, str, str]] = []
        worker = start = ""
        for row in reader:
            t = float(row[0])
            # the export's start, which every timestamp counts from (not this worker's first)
            worker, start = worker or row[2], start or _start_of(row[1], t)
            trace = gpus.get(row[3])
            if trace is None:
                trace = gpus[row[3]] = GpuTrace(row[3], row[4], [], {m: [] for m in metrics})
            trace.times.append(t)
            for name, text in zip(metrics, row[len(FIXED):], strict=True):
                trace.values[name].append(_number(text))
            cluster.append((t, row[5], row[6]))
            mine.append((t, row[7], row[8]))
    return WorkerTrace(worker or path.stem, path.stem, start, metrics,
                       sorted(gpus.values(), key=lambda g: _gpu_key(g.gpu)),
                       phases(mine), phases(cluster))


def _start_of(time: str, timestamp: float) -> str:
    """The export's start from one row: its time less its seconds since the start."""
    try:
        return format_rfc3339(round((parse_rfc3339(time) - timestamp) * 1000))
    except ValueError:
        return time


def trace_of_table(worker: str, stem: str, table: WorkerTable, metrics: Sequence[str],
                   start: int) -> WorkerTrace:
    """The trace of a worker's table as the export holds it before writing its file
    (``metrics``: the table's column names, ``start``: the export's start in ms): the same
    numbers ``read_worker_file`` reads back from that file, without formatting and parsing
    them (the session report draws from memory)."""
    def seconds(times: Sequence[int]) -> list[float]:
        return [(t - start) / 1000 for t in times]

    at = seconds(table.times)
    gpus = [GpuTrace(g.gpu, g.uuid, seconds(g.times), dict(zip(metrics, g.columns, strict=True)))
            for g in sorted(table.gpus, key=lambda g: _gpu_key(g.gpu))]
    return WorkerTrace(worker, stem, format_rfc3339(start) if table.times else "",
                       list(metrics), gpus,
                       phases((t, *s) for t, s in zip(at, table.worker, strict=True)),
                       phases((t, *s) for t, s in zip(at, table.cluster, strict=True)),
                       table.thinned)


def _gpu_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def export_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The worker files of an export folder (tidy layout), in name order.

    The files are those export.json lists, not whatever a directory listing finds: a folder
    exported into twice may still hold an earlier export's files. A folder without
    export.json (CSV files from elsewhere) is read by listing its CSV files.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CollectorError(f"{folder} is not a folder written by 'collector export'")
    record = folder / "export.json"
    if record.exists():
        try:
            found = json.loads(record.read_text(encoding="utf-8"))
            names, kind = found["files"], found.get("format", "csv")
            files = sorted(folder / str(name) for name in names)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CollectorError(f"{record} is not an export.json of 'collector export' "
                                 f"({type(exc).__name__}: {exc})") from None
        if kind != "csv":
            raise CollectorError(f"{folder} holds a {kind} export: this reads CSV exports "
                                 "(export again without --format)")
    else:
        files = sorted(p for p in folder.glob("*.csv") if p.name not in NOT_WORKER_FILES)
    if not files:
        raise CollectorError(f"{folder} holds no worker CSV files")
    return files


def read_export(folder: str | os.PathLike[str]) -> list[WorkerTrace]:
    """Every worker file of an export folder (``export_files``), read."""
    return [read_worker_file(p) for p in export_files(folder)]


@dataclass(frozen=True)
class Overview:
    """What the cluster picture draws of one worker: its GPUs' mean utilisation and total
    memory used per sample time (float arrays, NaN where no GPU has a value), its capacity
    and phases; a few bytes per sample time instead of every GPU's columns, so that a
    fleet's export is drawn a worker at a time."""

    worker: str
    start: str
    devices: tuple[str, ...]  # its GPUs' UUIDs ("": unknown), one per GPU
    samples: int  # of all its GPUs
    last: float  # its last sample's time (seconds since the start)
    capacity: float | None
    util: tuple[Any, Any] | None  # (times, values), None: no compute-util column
    memory: tuple[Any, Any] | None  # (times, bytes), None: no total-mem column
    phases: list[Phase]
    cluster_phases: list[Phase]


def overview_of(trace: WorkerTrace) -> Overview:
    import numpy as np

    def arrays(found: tuple[list[float], list[float | None]]) -> tuple[Any, Any]:
        return np.asarray(found[0], dtype=float), _floats(found[1])

    return Overview(trace.worker, trace.start, tuple(g.uuid for g in trace.gpus),
                    sum(len(g.times) for g in trace.gpus),
                    max((g.times[-1] for g in trace.gpus if g.times), default=0.0),
                    worker_capacity(trace),
                    arrays(trace.mean("compute-util")) if "compute-util" in trace.metrics
                    else None,
                    arrays(trace.total("total-mem")) if "total-mem" in trace.metrics else None,
                    trace.phases, trace.cluster_phases)


def worker_capacity(trace: WorkerTrace) -> float | None:
    """The memory capacity of all the worker's GPUs together (bytes), as ``total`` sums
    their memory; None when a GPU's capacity is unknown."""
    found = [g.capacity() for g in trace.gpus]
    return None if not found or None in found else sum(c for c in found if c is not None)
