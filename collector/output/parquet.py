"""The export's columnar output, for exports too big for CSV: one Parquet dataset of the tidy
layout, partitioned by worker the Hive way (``samples/worker=<name>/part-0.parquet``, the
name percent-encoded), which pandas, Dask, DuckDB and Spark read as one table with a
``worker`` column. pyarrow is an optional extra (``pip install 'dask-metrics[parquet]'``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dask_metrics.collector.errors import ArgumentError
from dask_metrics.collector.model.columns import Column
from dask_metrics.collector.model.tables import WorkerTable
from dask_metrics.collector.output.csv_lines import tidy_columns

EXPORT_FORMATS = ("csv", "parquet")
SAMPLES = "samples"
"""The dataset's folder in the export folder: apart from export.json and the CSV tables, so
that reading the folder reads Parquet files only."""
PART = "part-0.parquet"


def pyarrow() -> Any:
    """pyarrow, or an ArgumentError that says how to install it."""
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        raise ArgumentError("format", "parquet", "needs pyarrow",
                            "pip install 'dask-metrics[parquet]'") from None
    return pa


def worker_file(worker: str) -> str:
    """The worker's file, relative to the export folder; pyarrow, Dask and DuckDB read the
    partition's name back (percent-decoding it)."""
    return f"{SAMPLES}/worker={quote(worker, safe='')}/{PART}"


def worker_rows(table: WorkerTable, columns: Sequence[Column], start: int) -> Any:
    """One worker's rows as a pyarrow Table: ``timestamp`` (seconds since the start) and
    ``time`` (UTC, ms) as in the CSV, the job and DAG columns null where nothing ran, each
    metric a float64 column (null: no sample; NaN as sampled) whose field metadata holds its
    unit."""
    pa = pyarrow()
    keys, values = tidy_columns(table)
    times = keys["time"]
    strings = [(name, pa.string()) for name in ("gpu", "uuid", "job", "dag", "worker_job",
                                                "worker_dag")]
    fields = [pa.field("timestamp", pa.float64()), pa.field("time", pa.timestamp("ms", "UTC")),
              *(pa.field(name, kind) for name, kind in strings),
              *(pa.field(c.name, pa.float64(), metadata={"unit": c.unit}) for c in columns)]
    arrays = [pa.array([(t - start) / 1000 for t in times], pa.float64()),
              pa.array(times, pa.timestamp("ms", "UTC")),
              *(pa.array(keys[name], kind) for name, kind in strings),
              *(pa.array(v, pa.float64()) for v in values)]
    if not values:  # a worker without rows still has every column
        arrays += [pa.array([], pa.float64()) for _ in columns]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


class WorkerFiles:
    """Each worker's Parquet file written a piece of the range at a time (a row group per
    piece with rows), closed with its last piece; ``close`` closes what an error left open
    (the staging folder that holds them is removed then)."""

    def __init__(self, columns: Sequence[Column], start: int) -> None:
        self.columns, self.start = columns, start
        self._open: dict[Path, Any] = {}
        self._written: set[Path] = set()

    def write(self, path: Path, table: WorkerTable, *, last: bool = True) -> None:
        rows = worker_rows(table, self.columns, self.start)
        writer = self._open.get(path)
        if writer is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = self._open[path] = pyarrow().parquet.ParquetWriter(path, rows.schema)
        if rows.num_rows or (last and path not in self._written):
            writer.write_table(rows)  # a worker without rows: one empty row group, as before
            self._written.add(path)
        if last:
            self._open.pop(path).close()
            self._written.discard(path)

    def close(self) -> None:
        for writer in self._open.values():
            writer.close()
        self._open.clear()


@contextmanager
def parquet_files(wanted: bool, columns: Sequence[Column], start: int
                  ) -> Iterator[WorkerFiles | None]:
    """WorkerFiles for an export in Parquet (None for CSV), none left open when the block is
    left."""
    files = WorkerFiles(columns, start) if wanted else None
    try:
        yield files
    finally:
        if files is not None:
            files.close()
