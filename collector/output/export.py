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
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

import requests

from dask_metrics import __version__
from dask_metrics.collector.attribution.gpu_by_prefix import PrefixUses, prefix_rows, seen_by
from dask_metrics.collector.errors import ArgumentError, CollectorError
from dask_metrics.collector.model.columns import (
    DEFAULT_NAMES,
    WHEN_PRESENT,
    is_default,
    select,
    source_metrics,
)
from dask_metrics.collector.model.holes import Holes, warnings_of
from dask_metrics.collector.model.jobs import JobNames, jobs_csv_rows
from dask_metrics.collector.model.series import Series, Timeline, WorkerInfo
from dask_metrics.collector.model.tables import worker_table
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
from dask_metrics.collector.output.parquet import (
    EXPORT_FORMATS,
    parquet_files,
    pyarrow,
    worker_file,
)
from dask_metrics.collector.output.staging import files_written, staged
from dask_metrics.collector.peaks.fold import LATER
from dask_metrics.collector.query.batches import (
    batch_chunk,
    range_batches,
    samples_per_gpu,
    worker_batches,
)
from dask_metrics.collector.query.pieces import Piece, pieces
from dask_metrics.collector.query.presence import data_span, lookahead, present, read_span
from dask_metrics.collector.query.ranges import (
    DEFAULT_CHUNK,
    DEFAULT_MAX_AGE,
    check_range,
    check_step,
)
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.sources.cluster import executing_workers, fetch_cluster, fetch_jobs
from dask_metrics.collector.sources.discovery import Progress, range_workers
from dask_metrics.collector.sources.session_window import SCRAPE_GAP
from dask_metrics.collector.sources.summaries import activity_table
from dask_metrics.collector.sources.worker_fetch import Visit, VisitPart, WorkerData, fetch_piece
from dask_metrics.collector.sources.worker_series import fetch_gpu_series, fetch_worker_activity
from dask_metrics.collector.store.client import PrometheusClient
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


def _visit_part(piece: Piece, first: bool, last: bool, end: int, margin: int) -> VisitPart:
    """A visit's part of the range: the whole of it, or a piece's moments, from its window's
    start to the next one's (the last: to the range's end), its activity to be read
    ``margin`` around them."""
    if first and last:
        return VisitPart((piece.window[0], end + 1))
    return VisitPart((piece.window[0], end + 1 if last else piece.window[1]), first, last,
                     margin)


def _own_times(visited: Mapping[str, list[Series]], piece: Piece, first: bool, last: bool
               ) -> list[int]:
    """The sample times of a visited piece that are its own: inside it, with the samples
    before the range in the first piece and past it in the last (a piece's series reach into
    the next one's)."""
    lo = -LATER if first else piece.lo
    hi = LATER if last else piece.hi
    return sorted({t for got in visited.values() for one in got for t in one.times
                   if lo <= t <= hi})


# No reference cycles are created; the decoded JSON's many lists would trigger repeated full
# collections (about an eighth of an export's time).
@gc_paused()
def export(client: PrometheusClient, since: float, until: float, out: str | os.PathLike[str],
           *, metrics: Sequence[str] | None = None, step: float | None = None,
           max_age: float = DEFAULT_MAX_AGE, layout: str = "tidy",
           workers: Sequence[str] | None = None, chunk: float = DEFAULT_CHUNK,
           progress: Progress | None = None, asked: Mapping[str, Any] | None = None,
           cluster: str | None = None, replica_labels: Sequence[str] = REPLICA_LABELS,
           any_cluster: bool = False, visit: Visit | None = None,
           expect: Callable[[Sequence[WorkerInfo]], None] | None = None,
           worker_files: bool = True, visit_metrics: Sequence[str] = (),
           visit_tail: float = 0.0, visit_head: float = 0.0, reach: float | None = None,
           tables: str = "", format: str = "csv") -> ExportResult:
    """Write the GPU series of [since, until] (unix seconds) into the folder ``out``.

    ``metrics``: column names (all by default); ``step``: seconds of a resampling grid (raw
    samples by default); ``layout``: "tidy" or "seed"; ``workers``: names or globs;
    ``progress(done, total, worker, rows)`` is called before each batch of workers (and each
    chunk of its range) is fetched (``worker_batches``: its first worker; in the fetching
    thread) and once at the end;
    ``asked`` is recorded in export.json as what the
    user asked (the command line's own words); ``cluster``, ``replica_labels`` and
    ``any_cluster`` as for ``find_workers``; ``expect`` sees every worker that ``visit``
    will see, before the first; ``visit`` sees each worker's data (see ``Visit``) and,
    with ``visit_metrics``, those series' raw samples too (no column), and ``visit_tail``
    seconds more of its GPU series past ``until`` (never past now: the first scrape after
    the end dates a peak just before it) and ``visit_head`` seconds before ``since`` (the
    scrape interval across the start), which no file holds;
    ``worker_files`` False writes no per-worker CSV file (the session report,
    which keeps the tables its plots need from ``visit``: export.json then lists no
    files); ``tables``: a subfolder of ``out`` for workers.csv, jobs.csv and the summaries
    ("": beside the worker files), so that ``out``'s own CSV files are the workers' alone.
    ``reach``: in a range shorter than ``max_age``, the workers scraped within this many
    seconds before and after it count too (discovery.range_workers; default SCRAPE_GAP, at
    most ``max_age``).
    ``format``: "csv", or "parquet" for one Parquet dataset of the tidy rows partitioned by
    worker (parquet_output), the worker files' place.
    Raises ValueError for bad arguments and CollectorError (PrometheusError included) when
    the export fails.
    """
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
        pyarrow()  # before anything is asked of Prometheus
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    if step:
        check_step(since, until, step)
    columns = select(metrics)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    reach_ms = to_ms(min(SCRAPE_GAP, max_age) if reach is None else reach)
    step_ms = to_ms(step) if step else None
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise CollectorError(f"{target} exists and is not a folder: choose another one")
    warnings_before = len(client.warnings)

    named = Scope(None if any_cluster else cluster, tuple(replica_labels))
    first, final = data_span(client, start, end, chunk_ms, step_ms, named)  # the data
    lo, hi = read_span(first, final, start, end, age, step_ms)
    scope, chosen, outside = range_workers(client, lo, hi, chunk_ms, workers, cluster,
                                           replica_labels, any_cluster, reach_ms, age)
    if worker_files and outside is None:
        client.warn("no GPU sample lies inside the range (shorter than one scrape interval): "
                    "the per-worker files hold no row; jobs.csv and gpu_by_prefix.csv "
                    "cover it from the samples just before and after it")
    elif worker_files and outside:
        client.warn(f"{len(outside)} worker(s) have no GPU sample inside the range (scraped "
                    f"just before and after it: {', '.join(outside[:5])}"
                    f"{', …' if len(outside) > 5 else ''}): their files hold no row; jobs.csv "
                    "and gpu_by_prefix.csv count their GPUs' share from the samples around it")
    if is_default(metrics) and layout == "tidy":  # the seed layout is the original's files
        found = present(client, [c.metric for c in WHEN_PRESENT], lo - age, hi, scope)
        columns = select([*DEFAULT_NAMES, *(c.name for c in WHEN_PRESENT if c.metric in found)])
    timeline = fetch_cluster(client, lo - age, lookahead(hi, age), chunk_ms, scope)
    executed = executing_workers(client, lo, hi, chunk_ms, age, [w.name for w in chosen],
                                 scope)
    names = ({w.name: worker_file(w.name) for w in chosen} if format == "parquet"
             else safe_file_names([w.name for w in chosen], layout))

    # past the data's end, never further than the tail asked for beyond it: a range whose
    # data ended long before its end costs no chunks of nothing
    tail_end = max(hi, min(end + to_ms(visit_tail), hi + to_ms(visit_tail),
                           to_ms(time.time()))) if visit else hi

    outside = [*source_metrics(columns), *visit_metrics]
    per_gpu = samples_per_gpu(client, lo, hi, chunk_ms, len(outside), step_ms, scope)
    # a long range is read, joined and written a chunk at a time (pieces), so that memory
    # holds one batch's chunk whatever the range; a visit (the report) folds its workers a
    # piece at a time too, pieces as long as one worker's answer holds (the fewer, the less
    # read twice around their edges) and at least its tail; the seed layout's rows have a
    # slot for every GPU the worker had in the range: a batch's whole range is held then
    length = chunk_ms
    if visit is not None and not step_ms and chosen:
        widest = max(chosen, key=lambda w: len(w.gpus))
        length = max(batch_chunk([widest], per_gpu, chunk_ms), to_ms(visit_tail))
    parts = ([Piece(lo, hi, hi, (start, end))] if layout == "seed" or (visit and step_ms)
             else pieces(lo, hi, start, end, length, age, step_ms))
    whole = len(parts) == 1 and (visit is not None or layout == "seed")
    batches = (range_batches(chosen, per_gpu, lo, hi, chunk_ms) if whole
               else worker_batches(chosen, per_gpu * length / chunk_ms))
    firsts = list(accumulate([0, *map(len, batches)]))
    steps = [(b, k) for b in range(len(batches)) for k in range(len(parts))]
    last = len(parts) - 1
    margin = 2 * to_ms(visit_tail)  # what ran around a visited piece: its stamps' spans

    def fetch(at: tuple[int, int]) -> tuple[Timeline, list[tuple[
            WorkerData, dict[str, list[Series]], VisitPart]]]:
        b, k = at
        batch, part = [w.name for w in batches[b]], parts[k]
        if progress:  # a batch's chunks done count as fractions of it: a pace for a day
            progress(firsts[b] + len(batch) * k / len(parts), len(chosen), batch[0],
                     rows_written)
        around = (lo - to_ms(visit_head) if k == 0 else part.lo,
                  tail_end if k == last else min(tail_end, part.hi + to_ms(visit_tail))
                  ) if visit and step_ms is None else None
        # a batch's range held whole is read in as few queries as its answers allow
        wide = batch_chunk(batches[b], per_gpu, chunk_ms) if whole and not step_ms \
            else length
        known, found = fetch_piece(client, batch, columns, timeline, part, wide, step_ms,
                                   age, scope, executed, visit_metrics, around)
        if around is not None:  # the raw columns' read once over the visit's window too
            visited = _visit_part(part, k == 0, k == last, end, margin)
            if visited.margin is None:
                return known, [(found[w], found[w].around or {}, visited) for w in batch]
            ran = (visited.moments[0] - margin - age, visited.moments[1] + margin)
            runs = fetch_worker_activity(client, batch, timeline.between(
                ran[0], lookahead(ran[1], age)), *ran, wide, age, scope)
            return known, [(found[w], found[w].around or {}, visited._replace(ran=runs[w]))
                           for w in batch]
        whole_part = VisitPart((start, end + 1))
        if tail_end <= hi and not visit_head:
            return known, [(found[w], found[w].gpu, whole_part) for w in batch]
        more = fetch_gpu_series(client, batch, outside, hi, tail_end, wide, None, age,
                                scope) if tail_end > hi else {}
        head = fetch_gpu_series(client, batch, outside, lo - to_ms(visit_head), lo, wide,
                                None, age, scope) if visit_head else {}
        out = []
        for w in batch:
            gpu, after, before = found[w].gpu, more.get(w, {}), head.get(w, {})
            out.append((found[w], {m: [*before.get(m, []), *gpu.get(m, []), *after.get(m, [])]
                                   for m in gpu.keys() | after.keys() | before.keys()},
                        whole_part))
        return known, out

    if expect is not None:
        expect(chosen)
    rows_written = 0
    uses = PrefixUses(age, seen_by(chosen), (start, end))
    missing: list[tuple[str, tuple[int, int]]] = []
    gaps: dict[str, Holes] = {}
    with staged(target) as stage, files_written() as writer, parquet_files(
            format == "parquet", columns, start) as parquet:
        for (b, k), (known, found) in zip(steps, prefetched(fetch, steps), strict=True):
            for info, (data, visited, part) in zip(batches[b], found, strict=True):
                table = worker_table(data.gpu, columns, known, data.ran, age, data.resources)
                seen = gaps.setdefault(info.name, Holes(first, final, age))
                # the report's: with the samples around the range, each piece's own once
                seen.add(_own_times(visited, parts[k], k == 0, k == last) if visit
                         else table.times)
                if k == last:
                    missing += [(info.name, hole) for hole in gaps.pop(info.name).result()]
                uses.add_worker(known.times, data.prefixes, data.attribution, data.ran,
                                parts[k].window)
                if visit:
                    visit(info, visited, data.ran, table, part)
                rows_written += table.rows
                if not worker_files:
                    continue
                if parquet is not None:
                    parquet.write(stage / names[info.name], table, last=k == last)
                    continue
                if layout == "seed":
                    header, lines = seed_header(columns), seed_lines(table, start)
                else:
                    header, lines = tidy_header(columns), tidy_lines(info.name, table, start)
                writer.write(stage / names[info.name], header if k == 0 else None, lines,
                             last=k == last)
        if progress:
            progress(len(chosen), len(chosen), "", rows_written)
        for line in warnings_of(missing, age):
            client.warn(line)
        side = stage / tables
        side.mkdir(exist_ok=True)
        writer.write(side / "workers.csv", WORKERS_HEADER, map(csv_line, workers_rows(chosen)))
        store = client.store()
        # the range's DAGs and counters, also where no GPU sample lies (lo, hi: the GPUs')
        jobs = fetch_jobs(client, start, end, chunk_ms, age, scope)
        writer.write(side / JOBS_CSV, JOBS_COLUMNS, map(csv_line, jobs_csv_rows(jobs, start)))
        names_of_jobs = JobNames.from_rows(jobs).names  # as jobs.csv names them
        writer.write_pieces(side / ACTIVITIES_CSV, ACTIVITY_COLUMNS, (
            summary_lines(rows, ACTIVITY_COLUMNS) for rows in
            activity_table(client, start, end, age, chunk_ms, scope, names_of_jobs)))
        writer.write(side / GPU_BY_PREFIX_CSV, GPU_BY_PREFIX_COLUMNS,
                     summary_lines(prefix_rows(uses.result(), names_of_jobs),
                                   GPU_BY_PREFIX_COLUMNS))
        warnings = client.warnings[warnings_before:]
        files = [names[w.name] for w in chosen]
        record = {
            "command": "export",
            "asked": dict(asked) if asked is not None else {
                "since": since, "until": until, "metrics": list(metrics or DEFAULT_NAMES),
                "step": step, "max_age": max_age, "layout": layout,
                "workers": list(workers) if workers else None, "chunk": chunk,
                "cluster": cluster},
            "since": format_rfc3339(start),
            "until": format_rfc3339(end),
            "since_unix": start / 1000,
            "until_unix": end / 1000,
            "step_seconds": step,
            "max_age_seconds": max_age,
            "layout": layout,
            "format": format,
            "metrics": [c.name for c in columns],
            "units": {c.name: c.unit for c in columns},
            "prometheus": client.url,
            "store": store.kind,
            "store_note": store.note,
            "raw_reads": client.raw_reads,
            "cluster": scope.cluster,
            "replica_labels": list(scope.replica_labels),
            "workers": [w.name for w in chosen],
            "simulated": any(w.simulated for w in chosen),
            "simulated_workers": [w.name for w in chosen if w.simulated],
            "files": files if worker_files else [],
            "summaries": list(SUMMARIES),
            "tables": tables,
            "rows": rows_written,
            "warnings": warnings,
            "versions": {"dask-metrics": __version__, "python": platform.python_version(),
                         "requests": requests.__version__,
                         "prometheus": store.version},
        }
        writer.wait()
        (stage / "export.json").write_text(json.dumps(record, indent=2) + "\n",
                                           encoding="utf-8")
    return ExportResult(target, [w.name for w in chosen], files, rows_written, warnings,
                        scope.cluster, store.note, chosen)
