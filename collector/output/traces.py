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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.tables import GpuTable, WorkerTable, joined
from dask_metrics.collector.model.timespec import format_rfc3339, parse_rfc3339
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


NOT_TIDY = (ValueError, OverflowError, csv.Error)
"""What reading a file that is no tidy CSV raises: a field that is no number (or infinite,
as a time), bytes that are no UTF-8, a NUL in a line."""
PIECE_ROWS = 20_000
"""Rows of a worker file read at a time (``WorkerFile.pieces``): a fleet's day is drawn a
piece at a time, not held whole."""


@dataclass(frozen=True)
class WorkerFile:
    """A tidy worker file of ``collector export``, opened: its metric columns, its first
    row's worker and the export's start, and its last row's time, read without the rows
    between (a picture's time axis is known before its rows are read)."""

    path: Path
    worker: str
    start: str  # RFC 3339 ("" when the file has no rows)
    metrics: list[str]
    last: int | None  # ms since the export's start of its last row; None: no rows

    def pieces(self, rows: int = PIECE_ROWS) -> Iterator[WorkerTable]:
        """The file's rows as tables of about ``rows`` rows each, cut between sample times
        (times in ms since the export's start); CollectorError at a row that is not one of
        a tidy file or goes back in time."""
        width, values = len(FIXED) + len(self.metrics), len(FIXED)
        uuids: dict[str, str] = {}  # a GPU keeps its first row's UUID, as it always did
        piece, gpus, held = _new_piece(), {}, 0  # the piece's GPUs by number, its rows
        previous = -math.inf
        with open(self.path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            next(reader, None)
            try:
                for row in reader:
                    if not row:  # a blank line, as an editor may leave at the end
                        continue
                    if len(row) != width:
                        raise ValueError(f"{len(row)} fields where the header has {width}")
                    t = round(float(row[0]) * 1000)
                    if t != previous:
                        if t < previous:
                            raise CollectorError(f"{self.path}, line {reader.line_num}: the "
                                                 "rows go back in time (a tidy file is "
                                                 "oldest first)")
                        if held >= rows:
                            yield piece
                            piece, gpus, held = _new_piece(), {}, 0
                        piece.times.append(t)
                        piece.cluster.append((row[5], row[6]))
                        piece.worker.append((row[7], row[8]))
                        previous = t
                    gpu = gpus.get(row[3])
                    if gpu is None:
                        gpu = gpus[row[3]] = GpuTable(row[3], uuids.setdefault(row[3], row[4]),
                                                      [], [[] for _ in self.metrics])
                        piece.gpus.append(gpu)
                    gpu.times.append(t)
                    held += 1
                    for column, text in zip(gpu.columns, row[values:], strict=True):
                        column.append(float(text) if text else None)
            except NOT_TIDY as exc:
                raise CollectorError(f"{self.path}, line {reader.line_num}: not a row of a "
                                     f"tidy CSV file ({exc})") from None
        if piece.times:
            yield piece

    def trace(self, table: WorkerTable) -> WorkerTrace:
        """The trace of the file's rows in ``table`` (all of ``pieces`` joined, or the rows
        a chart draws of them)."""
        return _trace(self.worker, self.path.stem, self.start, table, self.metrics, 0)


def _new_piece() -> WorkerTable:
    return WorkerTable([], [], [], [])


def _row_time(path: Path, where: str, row: list[str], width: int) -> int:
    """A row's time in ms since the export's start; CollectorError when it is no tidy row."""
    try:
        if len(row) != width:
            raise ValueError(f"{len(row)} fields where the header has {width}")
        return round(float(row[0]) * 1000)
    except NOT_TIDY as exc:
        raise CollectorError(f"{path}, {where}: not a row of a tidy CSV file ({exc})"
                             ) from None


def open_worker_file(path: str | os.PathLike[str]) -> WorkerFile:
    """A tidy worker file's header, first row and last row; CollectorError when it is not
    one."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            first = next((row for row in reader if row), None)  # blank lines are no rows
        last = _last_row(path) if first is not None else None
    except NOT_TIDY as exc:
        raise CollectorError(f"{path} is not a tidy CSV file of 'collector export' ({exc})"
                             ) from None
    except OSError as exc:  # not an output that cannot be written, as the CLI takes OSError
        raise CollectorError(f"cannot read {path}: {exc.strerror or exc}") from None
    if header is None or tuple(header[: len(FIXED)]) != FIXED:
        raise CollectorError(f"{path} is not a tidy CSV file of 'collector export' "
                             f"(expected the columns {', '.join(FIXED)} first)")
    metrics = header[len(FIXED):]
    if first is None:
        return WorkerFile(path, path.stem, "", metrics, None)
    width = len(header)
    t = _row_time(path, "its first row", first, width)
    return WorkerFile(path, first[2] or path.stem, _start_of(first[1], t / 1000), metrics,
                      _row_time(path, "its last line", last, width) if last else t)


def _last_row(path: Path, block: int = 8192) -> list[str] | None:
    """The last non-empty line of a file, parsed as CSV, read from its end."""
    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        tail = b""
        while end > 0:
            size = min(block, end)
            end = fh.seek(end - size)
            tail = fh.read(size) + tail
            lines = tail.rstrip(b"\r\n").splitlines()
            if len(lines) > 1 or (end == 0 and lines):
                return next(csv.reader([lines[-1].decode("utf-8")]), None)
    return None


def read_worker_file(path: str | os.PathLike[str]) -> WorkerTrace:
    """One tidy CSV file, whole; CollectorError when it is not one."""
    found = open_worker_file(path)
    return found.trace(joined(found.pieces()))


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
    return _trace(worker, stem, format_rfc3339(start) if table.times else "", table, metrics,
                  start)


def _trace(worker: str, stem: str, start: str, table: WorkerTable, metrics: Sequence[str],
           origin: int) -> WorkerTrace:
    """``table`` as a trace, its times in seconds since ``origin`` (ms)."""
    def seconds(times: Sequence[int]) -> list[float]:
        return [(t - origin) / 1000 for t in times]

    at = seconds(table.times)
    gpus = [GpuTrace(g.gpu, g.uuid, seconds(g.times), dict(zip(metrics, g.columns, strict=True)))
            for g in sorted(table.gpus, key=lambda g: _gpu_key(g.gpu))]
    return WorkerTrace(worker, stem, start, list(metrics), gpus,
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


def worker_capacity(trace: WorkerTrace) -> float | None:
    """The memory capacity of all the worker's GPUs together (bytes), as ``total`` sums
    their memory; None when a GPU's capacity is unknown."""
    found = [g.capacity() for g in trace.gpus]
    return None if not found or None in found else sum(c for c in found if c is not None)
