"""CSV lines of the two layouts and rows of workers.csv: pure functions from a WorkerTable to
strings, so the formats are tested without a server or a file.

Lines are built column by column and joined with ",": numbers never need CSV quoting, and
the fields that might (worker, uuid, label values) are written by ``csv`` itself, once per
GPU or state, so the text is exactly what ``csv.writer`` would write row by row.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import io
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path

from dask_metrics.collector.model.columns import Column
from dask_metrics.collector.model.lifetimes import plain
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.model.tables import GpuTable, WorkerTable
from dask_metrics.collector.model.timespec import format_rfc3339
from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV, JOBS_CSV, SEED_KEYS, TIDY_KEYS

WORKERS_HEADER = ("worker", "address", "host", "gpus", "uuids", "simulated")
LAYOUTS = ("tidy", "seed")
RESERVED = frozenset({"workers", "export", *(Path(f).stem for f in (JOBS_CSV, ACTIVITIES_CSV,
                                                               GPU_BY_PREFIX_CSV))})
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
    """format_value through a bounded memo, with ``empty`` for no sample: values repeat
    (totals, temperatures, percents), and a hit is a plain dict lookup. Equal floats format
    alike (0.0 and -0.0 both as "0"), so the memo is exact."""

    def __init__(self, empty: str) -> None:
        super().__init__()
        self.empty = empty

    def __missing__(self, value: float | None) -> str:
        if len(self) >= 100_000:
            self.clear()
        text = self[value] = self.empty if value is None else format_value(value)
        return text


_tidy_value = _FormatMemo("").__getitem__
_seed_value = _FormatMemo("NaN").__getitem__  # seed lists keep one slot per GPU


def format_seconds(ms: int, start: int) -> str:
    """Seconds since the start, at Prometheus' millisecond resolution."""
    return f"{(ms - start) / 1000:.3f}"


def csv_line(fields: Iterable[str]) -> str:
    """``fields`` as csv.writer writes them (quoted where needed), without the line end."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(fields)
    return buffer.getvalue()


def _state_texts(*states: Sequence[tuple[str, str]]) -> list[str]:
    """The CSV text of the job/DAG columns at each time; the few distinct states are
    quoted once each. Job ids as the scheduler numbered them (its life is jobs.csv's)."""
    texts = {s: csv_line(chain.from_iterable((plain(job), dag) for job, dag in s))
             for s in set(zip(*states, strict=True))}
    return list(map(texts.__getitem__, zip(*states, strict=True)))


def _at_gpu(table: WorkerTable, gpu: GpuTable, per_time: list[str]) -> Iterable[str]:
    """``per_time`` (one item per time of the table) at the times of one GPU."""
    if gpu.times == table.times:
        return per_time
    return map(dict(zip(table.times, per_time, strict=True)).__getitem__, gpu.times)


def tidy_header(columns: Sequence[Column]) -> list[str]:
    return [*TIDY_KEYS, *(c.name for c in columns)]


def tidy_lines(worker: str, table: WorkerTable, start: int) -> Iterator[str]:
    """One line per (sample time, GPU), oldest first, GPUs in GPU order at equal times."""
    stamps = [f"{format_seconds(t, start)},{format_rfc3339(t)}" for t in table.times]
    states = _state_texts(table.cluster, table.worker)
    per_gpu = []
    for g in table.gpus:
        fields = zip(_at_gpu(table, g, stamps), repeat(csv_line([worker, g.gpu, g.uuid])),
                     _at_gpu(table, g, states), *(map(_tidy_value, c) for c in g.columns),
                     strict=False)  # repeat() is endless; the rest have one item per time
        per_gpu.append(map(",".join, fields))
    if all(g.times == table.times for g in table.gpus):  # the usual case: interleave them
        return chain.from_iterable(zip(*per_gpu, strict=True))
    merged = heapq.merge(*(zip(g.times, lines, strict=True)
                           for g, lines in zip(table.gpus, per_gpu, strict=True)),
                         key=itemgetter(0))  # stable: at equal times, GPU order
    return map(itemgetter(1), merged)


def tidy_columns(table: WorkerTable
                 ) -> tuple[dict[str, list[int] | list[str | None]], list[list[float | None]]]:
    """The tidy layout column-wise, rows in ``tidy_lines``' order: the keys but the worker
    and ``timestamp`` (a columnar dataset holds the worker in its partition; ``time`` is in
    ms), None where a row has no job, then the metric columns' values (None: no sample)."""
    index = {t: i for i, t in enumerate(table.times)}
    rows = sorted(((t, g, k) for g, gpu in enumerate(table.gpus)
                   for k, t in enumerate(gpu.times)), key=itemgetter(0))  # stable: GPU order
    at = [index[t] for t, _, _ in rows]
    keys: dict[str, list[int] | list[str | None]] = {"time": [t for t, _, _ in rows],
                            "gpu": [table.gpus[g].gpu for _, g, _ in rows],
                            "uuid": [table.gpus[g].uuid for _, g, _ in rows]}
    for name, states, part in (("job", table.cluster, 0), ("dag", table.cluster, 1),
                               ("worker_job", table.worker, 0), ("worker_dag", table.worker, 1)):
        texts = [plain(s[0]) if part == 0 else s[1] for s in states]
        keys[name] = [texts[i] or None for i in at]
    values = [[table.gpus[g].columns[c][k] for _, g, k in rows]
              for c in range(len(table.gpus[0].columns) if table.gpus else 0)]
    return keys, values


def seed_header(columns: Sequence[Column]) -> list[str]:
    return [*SEED_KEYS, *(c.name for c in columns)]


def _seed_slots(table: WorkerTable, gpu: GpuTable, column: int) -> Iterator[str]:
    """One GPU's values of one column at every time of the table, NaN where it has none."""
    values = gpu.columns[column]
    if gpu.times != table.times:
        values = list(map(dict(zip(gpu.times, values, strict=True)).get, table.times))
    return map(_seed_value, values)


def seed_lines(table: WorkerTable, start: int) -> Iterator[str]:
    """The original dask-metrics rows: one per sample time, the cluster-wide job/DAG, and per
    metric the values of all the worker's GPUs (in GPU order) joined by ", ", NaN where a GPU
    has no value at that time, so every list has one slot per GPU."""
    cells = []
    for i in range(len(table.gpus[0].columns) if table.gpus else 0):
        joined = map(SEED_SEPARATOR.join,
                     zip(*(_seed_slots(table, g, i) for g in table.gpus), strict=True))
        # Several GPUs: the separator's comma makes csv quote the cell (numbers hold no '"').
        cells.append(map('"{}"'.format, joined) if len(table.gpus) > 1 else joined)
    stamps = [format_seconds(t, start) for t in table.times]
    return map(",".join, zip(_state_texts(table.cluster), stamps, *cells, strict=True))


def workers_rows(workers: Iterable[WorkerInfo]) -> Iterator[list[str]]:
    """workers.csv: several addresses or hosts (a restarted worker) are space-separated;
    ``simulated`` is "true" for a worker with synthetic GPUs, else "false"."""
    for w in workers:
        yield [w.name, " ".join(w.addresses), " ".join(w.hosts), str(len(w.gpus)),
               " ".join(uuid for _, uuid in w.gpus), "true" if w.simulated else "false"]


#: File names stay under 255 bytes with room for a suffix (_2) and an extension (.png).
LONGEST_STEM = 120


def safe_file_names(workers: Sequence[str], layout: str) -> dict[str, str]:
    """{worker: file name}: tidy uses the worker's name made safe for any file system
    (an address such as tcp://10.0.0.1:4000 becomes tcp___10.0.0.1_4000), never clashing with
    workers.csv or export.json or another worker, and short enough for any file system (a
    longer name is cut and ends in a hash of the whole); seed uses worker_<position>.csv."""
    if layout == "seed":
        return {w: f"worker_{i}.csv" for i, w in enumerate(workers)}
    names: dict[str, str] = {}
    taken = set(RESERVED)
    for worker in workers:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", worker).lstrip(".") or "_"
        if len(base) > LONGEST_STEM:
            digest = hashlib.sha256(worker.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            base = f"{base[:LONGEST_STEM - 13]}-{digest}"
        stem, n = base, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}_{n}"
        taken.add(stem.lower())
        names[worker] = f"{stem}.csv"
    return names
