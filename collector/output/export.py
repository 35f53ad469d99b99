"""``export``: per-worker GPU series from Prometheus to CSV files, workers.csv and export.json.

A batch of workers' chunk of the range is joined and written while the next one is fetched
(the client mostly waits for Prometheus then), so memory is bounded by two of them, whatever
the number of workers and the length of the range (pieces). Everything is written into a
hidden staging folder beside ``out`` and moved into place only when the whole export
succeeded: a failed export leaves no file behind.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import requests

from dask_metrics import __version__
from dask_metrics.collector.attribution.gpu_by_prefix import PrefixUses, prefix_rows, seen_by
from dask_metrics.collector.errors import ArgumentError, CollectorError
from dask_metrics.collector.model.columns import (
    DEFAULT_NAMES,
    WHEN_PRESENT,
    Column,
    is_default,
    select,
)
from dask_metrics.collector.model.holes import Holes, warnings_of
from dask_metrics.collector.model.jobs import JobNames, jobs_csv_rows
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.model.tables import WorkerTable, worker_table
from dask_metrics.collector.model.timespec import format_rfc3339, to_ms
from dask_metrics.collector.output.csv_lines import (
    LAYOUTS,
    WORKERS_HEADER,
    csv_line,
    format_value,
    safe_file_names,
    seed_header,
    seed_lines,
    tidy_header,
    tidy_lines,
    workers_rows,
)
from dask_metrics.collector.output.export_reads import ExportReads, Visiting, own_times
from dask_metrics.collector.output.parquet import (
    EXPORT_FORMATS,
    WorkerFiles,
    parquet_files,
    pyarrow,
    worker_file,
)
from dask_metrics.collector.output.staging import FileWriter, files_written, staged
from dask_metrics.collector.query.presence import present
from dask_metrics.collector.query.ranges import (
    DEFAULT_CHUNK,
    DEFAULT_MAX_AGE,
    check_range,
    check_step,
)
from dask_metrics.collector.sources.cluster import fetch_jobs
from dask_metrics.collector.sources.discovery import Progress
from dask_metrics.collector.sources.plan import Choice, ReadPlan, read_plan
from dask_metrics.collector.sources.session_window import SCRAPE_GAP
from dask_metrics.collector.sources.summaries import activity_table
from dask_metrics.collector.store.client import PrometheusClient, Store
from dask_metrics.collector.work.background import gc_paused, prefetched
from dask_metrics.contract import (
    ACTIVITIES_CSV,
    ACTIVITY_COLUMNS,
    GPU_BY_PREFIX_COLUMNS,
    GPU_BY_PREFIX_CSV,
    JOBS_COLUMNS,
    JOBS_CSV,
    REPLICA_LABELS,
)


@dataclass(frozen=True)
class ExportResult:
    out: Path
    workers: list[str]
    files: list[str]  # the worker files' names, in ``workers`` order (even if not written)
    rows: int
    warnings: list[str]
    cluster: str | None = None
    store_note: str | None = None  # what this store's export holds differently (NaN dropped)
    inventory: list[WorkerInfo] = field(default_factory=list)  # the workers, as found


SUMMARIES = (ACTIVITIES_CSV, GPU_BY_PREFIX_CSV)
"""The per-job files of every export, beside the workers' files (export.json's "summaries")."""


def summary_lines(rows: Iterable[Mapping[str, Any]], header: Sequence[str]) -> Iterator[str]:
    """CSV lines of activities.csv or gpu_by_prefix.csv rows: numbers as in the workers'
    files, None empty."""
    for row in rows:
        yield csv_line(v if isinstance(v, str) else format_value(v)
                       for v in (row[k] for k in header))


# No reference cycles are created; the decoded JSON's many lists would trigger repeated full
# collections (about an eighth of an export's time).
@gc_paused()
def export(client: PrometheusClient, since: float, until: float, out: str | os.PathLike[str],
           *, metrics: Sequence[str] | None = None, step: float | None = None,
           max_age: float = DEFAULT_MAX_AGE, layout: str = "tidy",
           workers: Sequence[str] | None = None, chunk: float = DEFAULT_CHUNK,
           progress: Progress | None = None, asked: Mapping[str, Any] | None = None,
           cluster: str | None = None, replica_labels: Sequence[str] = REPLICA_LABELS,
           any_cluster: bool = False, reach: float | None = None, tables: str = "",
           format: str = "csv", visiting: Visiting | None = None) -> ExportResult:
    """Write the GPU series of [since, until] (unix seconds) into the folder ``out``.

    ``metrics``: column names (all by default); ``step``: seconds of a resampling grid (raw
    samples by default); ``layout``: "tidy" or "seed"; ``workers``: names or globs;
    ``progress(done, total, worker, rows)`` is called before each batch of workers (and each
    chunk of its range) is fetched (``worker_batches``: its first worker; in the fetching
    thread) and once at the end; ``asked`` is recorded in export.json as what the user
    asked (the command line's own words); ``cluster``, ``replica_labels`` and
    ``any_cluster`` as for ``find_workers``; ``reach``: in a range shorter than
    ``max_age``, the workers scraped within this many seconds before and after it count too
    (discovery.range_workers; default SCRAPE_GAP, at most ``max_age``); ``tables``: a
    subfolder of ``out`` for workers.csv, jobs.csv and the summaries ("": beside the worker
    files), so that ``out``'s own CSV files are the workers' alone; ``format``: "csv", or
    "parquet" for one Parquet dataset of the tidy rows partitioned by worker; ``visiting``:
    a caller that sees each worker's data as it is read (``Visiting``).

    Raises ValueError for bad arguments and CollectorError (PrometheusError included) when
    the export fails.
    """
    _check(since, until, step, layout, tables, format)
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise CollectorError(f"{target} exists and is not a folder: choose another one")
    warnings_before = len(client.warnings)
    plan = read_plan(client, since, until, Choice(workers, cluster, tuple(replica_labels),
                                                  any_cluster),
                     max_age=max_age, chunk=chunk, step=step,
                     reach=to_ms(min(SCRAPE_GAP, max_age) if reach is None else reach))
    files_too = visiting is None or visiting.worker_files
    if files_too:
        _say_outside(client, plan.outside)
    columns = select(metrics)
    if is_default(metrics) and layout == "tidy":  # the seed layout is the original's files
        found = present(client, [c.metric for c in WHEN_PRESENT], plan.lo - plan.age, plan.hi,
                        plan.scope)
        columns = select([*DEFAULT_NAMES, *(c.name for c in WHEN_PRESENT if c.metric in found)])
    names = ({w: worker_file(w) for w in plan.names} if format == "parquet"
             else safe_file_names(plan.names, layout))
    reads = ExportReads(client, plan, columns, layout == "seed", visiting, progress)
    if visiting is not None and visiting.expect is not None:
        visiting.expect(plan.workers)
    with staged(target) as stage, files_written() as writer, parquet_files(
            format == "parquet", columns, plan.start) as parquet:
        uses = _write_workers(reads, RowFiles(
            stage, names, layout, writer, parquet) if files_too else None)
        if progress:
            progress(len(plan.workers), len(plan.workers), "", reads.rows)
        side = stage / tables
        side.mkdir(exist_ok=True)
        writer.write(side / "workers.csv", WORKERS_HEADER,
                     map(csv_line, workers_rows(plan.workers)))
        store = client.store()
        _write_tables(client, plan, writer, side, uses)
        warnings = client.warnings[warnings_before:]
        files = [names[w] for w in plan.names]
        asked = dict(asked) if asked is not None else {
            "since": since, "until": until, "metrics": list(metrics or DEFAULT_NAMES),
            "step": step, "max_age": max_age, "layout": layout,
            "workers": list(workers) if workers else None, "chunk": chunk, "cluster": cluster}
        record = export_record(client, store, plan, columns, reads.rows, warnings, {
            "command": "export", "asked": asked, "step_seconds": step,
            "max_age_seconds": max_age, "layout": layout, "format": format,
            "files": files if files_too else [], "tables": tables})
        writer.wait()
        (stage / "export.json").write_text(json.dumps(record, indent=2) + "\n",
                                           encoding="utf-8")
    return ExportResult(target, plan.names, files, reads.rows, warnings, plan.scope.cluster,
                        store.note, plan.workers)


def _check(since: float, until: float, step: float | None, layout: str, tables: str,
           format: str) -> None:
    """Bad arguments, said before anything is asked of the store."""
    if tables and (Path(tables).name != tables or tables in (".", "..")):
        raise ValueError(f"tables {tables!r}: must be a plain folder name")
    check_range(since, until)
    if format not in EXPORT_FORMATS:
        raise ArgumentError("format", format, "is not a format",
                            f"one of {', '.join(EXPORT_FORMATS)}")
    if format == "parquet":
        if layout != "tidy":
            raise ArgumentError("format", format, "writes the tidy layout",
                                "the seed layout is the original's CSV files")
        pyarrow()
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    if step:
        check_step(since, until, step)


def _say_outside(client: PrometheusClient, outside: list[str] | None) -> None:
    """The workers whose files hold no row though their GPUs count (a range between two
    scrapes, or one shorter than a scrape interval)."""
    if outside is None:
        client.warn("no GPU sample lies inside the range (shorter than one scrape interval): "
                    "the per-worker files hold no row; jobs.csv and gpu_by_prefix.csv "
                    "cover it from the samples just before and after it")
    elif outside:
        client.warn(f"{len(outside)} worker(s) have no GPU sample inside the range (scraped "
                    f"just before and after it: {', '.join(outside[:5])}"
                    f"{', …' if len(outside) > 5 else ''}): their files hold no row; jobs.csv "
                    "and gpu_by_prefix.csv count their GPUs' share from the samples around it")


class RowFiles(NamedTuple):
    """Where an export writes each worker's rows: CSV files of a layout, or Parquet."""

    stage: Path
    names: Mapping[str, str]
    layout: str
    writer: FileWriter
    parquet: WorkerFiles | None

    def write(self, name: str, table: WorkerTable, columns: Sequence[Column], start: int,
              first: bool, last: bool) -> None:
        path = self.stage / self.names[name]
        if self.parquet is not None:
            self.parquet.write(path, table, last=last)
        elif self.layout == "seed":
            self.writer.write(path, seed_header(columns) if first else None,
                              seed_lines(table, start), last=last)
        else:
            self.writer.write(path, tidy_header(columns) if first else None,
                              tidy_lines(name, table, start), last=last)


def _write_workers(reads: ExportReads, files: RowFiles | None) -> PrefixUses:
    """Every worker's rows, a step at a time, the next step read meanwhile; the holes in
    its data said; what each task prefix got of the GPUs, as it goes."""
    plan, last = reads.plan, reads.last
    uses = PrefixUses(plan.age, seen_by(plan.workers), (plan.start, plan.end))
    missing: list[tuple[str, tuple[int, int]]] = []
    gaps: dict[str, Holes] = {}
    for (b, k), (known, found) in zip(reads.steps, prefetched(reads, reads.steps),
                                      strict=True):
        piece = reads.parts[k]
        for info, (data, visited, part) in zip(reads.batches[b], found, strict=True):
            table = worker_table(data.gpu, reads.columns, known, data.ran, plan.age,
                                 data.resources)
            seen = gaps.setdefault(info.name, Holes(plan.first, plan.final, plan.age))
            # the report's: with the samples around the range, each piece's own once
            seen.add(own_times(visited, piece, k == 0, k == last) if reads.visiting
                     else table.times)
            if k == last:
                missing += [(info.name, hole) for hole in gaps.pop(info.name).result()]
            uses.add_worker(known.times, data.prefixes, data.attribution, data.ran,
                            piece.window)
            if reads.visiting:
                reads.visiting.visit(info, visited, data.ran, table, part)
            reads.rows += table.rows
            if files is not None:
                files.write(info.name, table, reads.columns, plan.start, k == 0, k == last)
    for line in warnings_of(missing, plan.age):
        reads.client.warn(line)
    return uses


def _write_tables(client: PrometheusClient, plan: ReadPlan, writer: FileWriter, side: Path,
                  uses: PrefixUses) -> None:
    """jobs.csv and the per-job summaries, into ``side``."""
    # the range's DAGs and counters, also where no GPU sample lies (lo, hi: the GPUs')
    jobs = fetch_jobs(client, plan.start, plan.end, plan.chunk, plan.age, plan.scope)
    writer.write(side / JOBS_CSV, JOBS_COLUMNS, map(csv_line, jobs_csv_rows(jobs, plan.start)))
    names_of_jobs = JobNames.from_rows(jobs).names  # as jobs.csv names them
    writer.write_pieces(side / ACTIVITIES_CSV, ACTIVITY_COLUMNS, (
        summary_lines(rows, ACTIVITY_COLUMNS) for rows in
        activity_table(client, plan.start, plan.end, plan.age, plan.chunk, plan.scope,
                       names_of_jobs)))
    writer.write(side / GPU_BY_PREFIX_CSV, GPU_BY_PREFIX_COLUMNS,
                 summary_lines(prefix_rows(uses.result(), names_of_jobs),
                               GPU_BY_PREFIX_COLUMNS))


def export_record(client: PrometheusClient, store: Store, plan: ReadPlan,
                  columns: Sequence[Column], rows: int, warnings: list[str],
                  options: Mapping[str, Any]) -> dict[str, Any]:
    """export.json: what was asked, read and written, and by which versions."""
    chosen = plan.workers
    return {
        "command": options["command"],
        "asked": options["asked"],
        "since": format_rfc3339(plan.start),
        "until": format_rfc3339(plan.end),
        "since_unix": plan.start / 1000,
        "until_unix": plan.end / 1000,
        "step_seconds": options["step_seconds"],
        "max_age_seconds": options["max_age_seconds"],
        "layout": options["layout"],
        "format": options["format"],
        "metrics": [c.name for c in columns],
        "units": {c.name: c.unit for c in columns},
        "prometheus": client.url,
        "store": store.kind,
        "store_note": store.note,
        "raw_reads": client.raw_reads,
        "cluster": plan.scope.cluster,
        "replica_labels": list(plan.scope.replica_labels),
        "workers": plan.names,
        "simulated": any(w.simulated for w in chosen),
        "simulated_workers": [w.name for w in chosen if w.simulated],
        "files": options["files"],
        "summaries": list(SUMMARIES),
        "tables": options["tables"],
        "rows": rows,
        "warnings": warnings,
        "versions": {"dask-metrics": __version__, "python": platform.python_version(),
                     "requests": requests.__version__, "prometheus": store.version},
    }
