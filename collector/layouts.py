"""CSV rows of the two layouts and of workers.csv: pure functions from GpuRows to lists of
strings, so the formats are tested without a server or a file."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby

from collector.columns import Column
from collector.series import GpuKey, GpuRow, WorkerInfo, gpu_order
from collector.timespec import format_rfc3339

TIDY_KEYS = ("timestamp", "time", "worker", "gpu", "uuid", "job", "dag", "worker_job",
             "worker_dag")
SEED_KEYS = ("job", "dag", "timestamp")
WORKERS_HEADER = ("worker", "address", "host", "gpus", "uuids")
LAYOUTS = ("tidy", "seed")
RESERVED = frozenset({"workers", "export"})
SEED_SEPARATOR = ", "


def format_value(value: float | None) -> str:
    """Empty for no sample; NaN and ±Inf as Prometheus writes them; integers without '.0'."""
    if value is None:
        return ""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


class _FormatMemo(dict[float | None, str]):
    """format_value through a bounded memo: values repeat (totals, temperatures, percents),
    and a hit is a plain dict lookup. Equal floats format alike (0.0 and -0.0 both as "0"),
    so the memo is exact."""

    def __missing__(self, value: float | None) -> str:
        if len(self) >= 100_000:
            self.clear()
        text = self[value] = format_value(value)
        return text


_formatted = _FormatMemo()


def format_seconds(ms: int, start: int) -> str:
    """Seconds since the start, at Prometheus' millisecond resolution."""
    return f"{(ms - start) / 1000:.3f}"


def _slot(values: Sequence[float | None] | None, i: int) -> float:
    """A GPU's i-th value in a seed list: NaN when it has no row or no sample then."""
    value = values[i] if values is not None else None
    return math.nan if value is None else value


def tidy_header(columns: Sequence[Column]) -> list[str]:
    return [*TIDY_KEYS, *(c.name for c in columns)]


def tidy_rows(worker: str, rows: Iterable[GpuRow], start: int) -> Iterator[list[str]]:
    """One row per (sample time, GPU)."""
    time, stamps = None, ("", "")
    for r in rows:
        if r.time != time:  # the rows of one scrape's GPUs share their time columns
            time, stamps = r.time, (format_seconds(r.time, start), format_rfc3339(r.time))
        yield [*stamps, worker, r.gpu, r.uuid, r.job, r.dag, r.worker_job, r.worker_dag,
               *map(_formatted.__getitem__, r.values)]


def seed_header(columns: Sequence[Column]) -> list[str]:
    return [*SEED_KEYS, *(c.name for c in columns)]


def seed_rows(rows: Sequence[GpuRow], start: int) -> Iterator[list[str]]:
    """The original dask-metrics rows: one per sample time, the cluster-wide job/DAG, and per
    metric the values of all the worker's GPUs (in GPU order) joined by ", ", NaN where a GPU
    has no value at that time, so every list has one slot per GPU."""
    gpus: list[GpuKey] = sorted({(r.gpu, r.uuid) for r in rows}, key=gpu_order)
    for time, group in groupby(rows, key=lambda r: r.time):
        at_time = list(group)
        by_gpu = {(r.gpu, r.uuid): r.values for r in at_time}
        width = len(at_time[0].values)
        cells = [SEED_SEPARATOR.join(_formatted[_slot(by_gpu.get(g), i)] for g in gpus)
                 for i in range(width)]
        yield [at_time[0].job, at_time[0].dag, format_seconds(time, start), *cells]


def workers_rows(workers: Iterable[WorkerInfo]) -> Iterator[list[str]]:
    """workers.csv: several addresses or hosts (a restarted worker) are space-separated."""
    for w in workers:
        yield [w.name, " ".join(w.addresses), " ".join(w.hosts), str(len(w.gpus)),
               " ".join(uuid for _, uuid in w.gpus)]


def safe_file_names(workers: Sequence[str], layout: str) -> dict[str, str]:
    """{worker: file name}: tidy uses the worker's name made safe for any file system
    (an address such as tcp://10.0.0.1:4000 becomes tcp___10.0.0.1_4000), never clashing with
    workers.csv or export.json or another worker; seed uses worker_<position>.csv."""
    if layout == "seed":
        return {w: f"worker_{i}.csv" for i, w in enumerate(workers)}
    names: dict[str, str] = {}
    taken = set(RESERVED)
    for worker in workers:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", worker).lstrip(".") or "_"
        stem, n = base, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}_{n}"
        taken.add(stem.lower())
        names[worker] = f"{stem}.csv"
    return names
