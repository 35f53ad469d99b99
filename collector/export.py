"""``export``: per-worker GPU series from Prometheus to CSV files, workers.csv and export.json.

One worker is fetched, joined and written at a time, so memory is bounded by one worker's
data. Everything is written into a hidden staging folder beside ``out`` and moved into place
only when the whole export succeeded: a failed export leaves no file behind.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import requests

from dask_metrics import __version__
from dask_metrics.collector.columns import NAMES, select, source_metrics
from dask_metrics.collector.errors import CollectorError, UsageError
from dask_metrics.collector.fetch import (
    data_span,
    discover_workers,
    fetch_cluster,
    fetch_gpu_series,
    fetch_worker_activity,
)
from dask_metrics.collector.layouts import (
    LAYOUTS,
    WORKERS_HEADER,
    csv_line,
    safe_file_names,
    seed_header,
    seed_lines,
    tidy_header,
    tidy_lines,
    workers_rows,
)
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.series import WorkerInfo, select_workers, worker_table
from dask_metrics.collector.timespec import format_duration, format_rfc3339, to_ms

DEFAULT_MAX_AGE = 120.0
"""Seconds: how old a sample may be and still describe a later time (a --step grid point, or
the job/DAG state of a GPU sample). Bridges missed scrapes, not a worker restart."""
DEFAULT_CHUNK = 3600.0
"""Seconds of raw samples asked for in one query; halved automatically when too big."""

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ExportResult:
    out: Path
    workers: list[str]
    files: list[str]
    rows: int
    warnings: list[str]


def find_workers(client: PrometheusClient, start: int, end: int, chunk: int,
                 patterns: Sequence[str] | None) -> list[WorkerInfo]:
    """The workers with GPU series in [start, end] (ms) that ``patterns`` select.

    Raises CollectorError when there is none, or when a pattern matches none.
    """
    found = discover_workers(client, start, end, chunk)
    span = f"between {format_rfc3339(start)} and {format_rfc3339(end)}"
    if not found:
        raise CollectorError(f"no GPU series (dask_gpu_info) {span} at {client.url}: is "
                             "Prometheus scraping the GPU exporters, and is the time range right?")
    try:
        return select_workers(found, patterns)
    except LookupError as exc:
        known = ", ".join(w.name for w in found[:10]) + (", …" if len(found) > 10 else "")
        raise CollectorError(f"no worker matches {exc.args[0]!r} {span} (workers: {known})"
                             ) from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off (reference counting still frees everything),
    back on afterwards only if it was on. Also a decorator: ``@gc_paused()``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def check_range(since: float, until: float) -> None:
    if not since < until:
        raise ValueError(f"the start ({format_rfc3339(to_ms(since))}) must be before the end "
                         f"({format_rfc3339(to_ms(until))})")


MAX_STEP_ROWS = 5_000_000
"""Grid points per GPU that ``--step`` may ask for: a 1 s grid over eight weeks. Finer
than that is a mistyped step (1ms for 1m), not an analysis; raw samples need no grid."""


def check_step(since: float, until: float, step: float) -> None:
    """A grid of ``step`` over [since, until] has more than one point and not millions."""
    span, points = until - since, (until - since) / step
    if points < 1:
        raise UsageError(f"--step {format_duration(step)} is longer than the range "
                         f"({format_duration(span)}): give a shorter step, or none for raw "
                         "samples")
    if points > MAX_STEP_ROWS:
        raise UsageError(f"--step {format_duration(step)} over {format_duration(span)} makes "
                         f"{points:,.0f} rows per GPU (at most {MAX_STEP_ROWS:,}): give a "
                         "longer step, or none for the raw samples as scraped")


# No reference cycles are created; the decoded JSON's many lists would trigger repeated full
# collections (about an eighth of an export's time).
@gc_paused()
def export(client: PrometheusClient, since: float, until: float, out: str | os.PathLike[str],
           *, metrics: Sequence[str] | None = None, step: float | None = None,
           max_age: float = DEFAULT_MAX_AGE, layout: str = "tidy",
           workers: Sequence[str] | None = None, chunk: float = DEFAULT_CHUNK,
           progress: Progress | None = None, asked: Mapping[str, Any] | None = None
           ) -> ExportResult:
    """Write the GPU series of [since, until] (unix seconds) into the folder ``out``.

    ``metrics``: column names (all by default); ``step``: seconds of a resampling grid (raw
    samples by default); ``layout``: "tidy" or "seed"; ``workers``: names or globs;
    ``progress(done, total, worker)`` is called before each worker; ``asked`` is recorded in
    export.json as what the user asked (the command line's own words). Raises ValueError for
    bad arguments and CollectorError (PrometheusError included) when the export fails.
    """
    check_range(since, until)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    if step:
        check_step(since, until, step)
    columns = select(metrics)
    start, end, age, chunk_ms = to_ms(since), to_ms(until), to_ms(max_age), to_ms(chunk)
    step_ms = to_ms(step) if step else None
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise CollectorError(f"{target} exists and is not a folder: choose another --out")
    warnings_before = len(client.warnings)

    lo, hi = data_span(client, start, end, chunk_ms, step_ms)  # the data, not the range asked
    chosen = find_workers(client, lo, hi, chunk_ms, workers)
    cluster = fetch_cluster(client, lo - age, hi, chunk_ms)
    names = safe_file_names([w.name for w in chosen], layout)
    rows_written = 0
    with _staging(target) as stage:
        for i, info in enumerate(chosen):
            if progress:
                progress(i, len(chosen), info.name)
            series = fetch_gpu_series(client, info.name, source_metrics(columns), lo, hi,
                                      chunk_ms, step_ms, age)
            activity = fetch_worker_activity(client, info.name, cluster, lo - age, hi, chunk_ms)
            table = worker_table(series, columns, cluster, activity, age)
            if layout == "seed":
                header, lines = seed_header(columns), seed_lines(table, start)
            else:
                header, lines = tidy_header(columns), tidy_lines(info.name, table, start)
            _write_lines(stage / names[info.name], header, lines)
            rows_written += table.rows
        if progress:
            progress(len(chosen), len(chosen), "")
        _write_lines(stage / "workers.csv", WORKERS_HEADER, map(csv_line, workers_rows(chosen)))
        warnings = client.warnings[warnings_before:]
        files = [names[w.name] for w in chosen]
        record = {
            "command": "export",
            "asked": dict(asked) if asked is not None else {
                "since": since, "until": until, "metrics": list(metrics or NAMES),
                "step": step, "max_age": max_age, "layout": layout,
                "workers": list(workers) if workers else None, "chunk": chunk},
            "since": format_rfc3339(start),
            "until": format_rfc3339(end),
            "since_unix": start / 1000,
            "until_unix": end / 1000,
            "step_seconds": step,
            "max_age_seconds": max_age,
            "layout": layout,
            "metrics": [c.name for c in columns],
            "units": {c.name: c.unit for c in columns},
            "prometheus": client.url,
            "workers": [w.name for w in chosen],
            "files": files,
            "rows": rows_written,
            "warnings": warnings,
            "versions": {"dask-metrics": __version__, "python": platform.python_version(),
                         "requests": requests.__version__,
                         "prometheus": client.build_version()},
        }
        (stage / "export.json").write_text(json.dumps(record, indent=2) + "\n",
                                           encoding="utf-8")
    return ExportResult(target, [w.name for w in chosen], files, rows_written, warnings)


def _write_lines(path: Path, header: Sequence[str], lines: Iterable[str]) -> None:
    """A CSV file: the header, then ``lines`` (CSV text without line ends), in one write."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("\n".join(chain([csv_line(header)], lines)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A hidden folder beside ``out`` whose files are moved into ``out`` on success.

    A new ``out`` appears whole, by one rename; into an existing one each file is moved by
    its own atomic rename (files of an earlier export that this one does not write are left).
    On any failure the staging folder is removed and ``out`` is untouched.
    """
    anchor = out.absolute().parent
    while not anchor.exists():
        anchor = anchor.parent
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=anchor))
    try:
        yield stage
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            for item in stage.iterdir():
                os.replace(item, out / item.name)
            stage.rmdir()
        else:
            stage.chmod(0o755)  # mkdtemp made it private
            os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
