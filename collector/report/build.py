"""``report``: one page per session, from one export of it (I/O; the numbers are computed in
``model``, ``usage`` and ``advice``, the page drawn by ``render``).

The session is exported with ``export.export`` into a temporary folder (the report's own
columns only, without the per-worker CSV files) while ``model.Gatherer`` reduces each
worker's data as it goes by and its table is kept; the export's jobs.csv, activities.csv and
gpu_by_prefix.csv are read where the export writes them, and the charts (``chart``, SVG) are
drawn from the kept tables of the workers shown, the numbers their CSV files would hold.
report.json and report.html are written atomically.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dask_metrics import __version__
from dask_metrics.atomicfile import atomic_write_texts
from dask_metrics.collector.columns import select
from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.export import DEFAULT_CHUNK, DEFAULT_MAX_AGE, Progress, export
from dask_metrics.collector.fetch import Scope, peak_windows
from dask_metrics.collector.peaks import DEFAULT_PEAK_WINDOW, PEAK_DATING, tail_of
from dask_metrics.collector.plotdata import read_provenance, trace_of_table
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.report.advice import DEFAULT_HEADROOM, MOST_HEADROOM, load_models
from dask_metrics.collector.report.chart import worker_chart
from dask_metrics.collector.report.model import Gatherer, build
from dask_metrics.collector.report.render import render_html, render_text
from dask_metrics.collector.series import Series, Timeline, WorkerInfo, WorkerTable
from dask_metrics.collector.session_window import SCRAPE_GAP
from dask_metrics.collector.timespec import format_rfc3339, to_ms
from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV, JOBS_CSV, REPLICA_LABELS

REPORT_METRICS = ("total-mem", "mem-util", "compute-util", "peak-mem", "energy", "busy-seconds",
                  "sm-active-seconds", "tensor-active-seconds", "rmm-used", "rmm-pool")
REPORT_HTML, REPORT_JSON = "report.html", "report.json"
FORMATS = ("html", "text")
DEFAULT_PLOTS = 4
"""Per-worker charts on the page: the workers with the highest peak memory (% of capacity).
A chart is about 0.4 MB of SVG, so the page draws a few; ``collector plot`` draws them
all."""


@dataclass(frozen=True)
class ReportResult:
    out: Path | None
    files: list[Path]
    report: dict[str, Any]
    text: str | None  # the text rendering (format "text")


def _rows(path: Path) -> list[dict[str, str]] | None:
    """A CSV file's rows, None where the export did not write it."""
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


class _Kept:
    """The export's ``visit``: the Gatherer's, and (``keep``: where charts are drawn) each
    worker's table kept for its chart (about 0.4 MiB per GPU-hour at 1 s scrapes)."""

    def __init__(self, gather: Gatherer, keep: bool) -> None:
        self.gather, self.keep = gather, keep
        self.tables: dict[str, WorkerTable] = {}

    def __call__(self, info: WorkerInfo, series: Mapping[str, list[Series]],
                 activity: Timeline, table: WorkerTable) -> None:
        self.gather(info, series, activity, table)
        if self.keep:
            self.tables[info.name] = table


def _plots(data: Path, files: Mapping[str, str], kept: _Kept, start: int,
           report: Mapping[str, Any], most: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Charts of the ``most`` workers with the highest peak memory (% of capacity), as
    (entries for report.json, {chart name: SVG})."""
    workers = [w["worker"] for w in report["session"]["workers"]]
    percent = {w: 0.0 for w in workers}
    for job in report["jobs"]:
        for p in job["peaks"]:
            percent[p["worker"]] = max(percent.get(p["worker"], 0.0), p["peak_percent"] or 0.0)
    chosen = sorted(workers, key=lambda w: -percent[w])[:most]
    if not chosen:
        return [{"file": None, "what": "no plots: none asked for (--plots 0)" if workers
                 else "no plots: no worker"}], {}
    try:
        import numpy  # noqa: F401  (the charts' envelope; Dask does not require it)
    except ImportError:
        return [{"file": None, "what": "no plots: the charts need numpy (pip install numpy)"}], {}
    provenance = read_provenance(data)
    metrics = [c.name for c in select(REPORT_METRICS)]
    charts = {}
    for worker in chosen:
        stem = Path(files[worker]).stem
        trace = trace_of_table(worker, stem, kept.tables[worker], metrics, start)
        charts[f"{stem}.svg"] = worker_chart(trace, provenance.names,
                                             worker in provenance.simulated)
    entries = [{"file": name, "what": "worker"} for name in charts]
    if len(chosen) < len(workers):
        entries.append({"file": None, "what": f"{len(workers) - len(chosen)} more worker(s) "
                        f"not drawn here (the {len(chosen)} with the highest peak memory are): "
                        "'collector plot' draws every worker"})
    return entries, charts


def make_report(client: PrometheusClient, since: float, until: float,
                out: str | os.PathLike[str] | None, *, fmt: str = "html",
                workers: Sequence[str] | None = None, max_age: float = DEFAULT_MAX_AGE,
                chunk: float = DEFAULT_CHUNK, progress: Progress | None = None,
                cluster: str | None = None, replica_labels: Sequence[str] = REPLICA_LABELS,
                any_cluster: bool = False, peak_window: float = DEFAULT_PEAK_WINDOW,
                headroom: float = DEFAULT_HEADROOM, plots: int = DEFAULT_PLOTS,
                asked: Mapping[str, Any] | None = None) -> ReportResult:
    """The report of [since, until] (unix seconds): ``fmt`` "html" writes out/report.html and
    out/report.json; "text" returns the text rendering (and writes report.json where ``out``
    is given). ``plots``: how many workers to chart. Other arguments as for ``export``.
    Raises CollectorError as ``export`` does."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "html" and out is None:
        raise ValueError("an HTML report needs a folder to write into")
    if not (isinstance(headroom, int | float) and 1 <= headroom <= MOST_HEADROOM):
        raise ValueError(f"headroom {headroom!r}: must be a number from 1 to {MOST_HEADROOM:g}")
    if plots < 0:
        raise ValueError(f"plots {plots}: must be 0 or more")
    named = Scope(None if any_cluster else cluster, tuple(replica_labels))
    windows = peak_windows(client, to_ms(since), to_ms(until), named)
    gather = Gatherer(REPORT_METRICS, to_ms(max_age), to_ms(since), to_ms(until),
                      to_ms(peak_window), windows)
    tail = tail_of(windows, to_ms(peak_window)) / 1000
    kept = _Kept(gather, keep=fmt == "html" and plots > 0)
    with tempfile.TemporaryDirectory(prefix="collector-report-") as tmp:
        data = Path(tmp) / "export"
        result = export(client, since, until, data, metrics=list(REPORT_METRICS),
                        max_age=max_age, workers=workers, chunk=chunk, progress=progress,
                        cluster=cluster, replica_labels=replica_labels,
                        any_cluster=any_cluster, visit=kept,
                        worker_files=False, visit_metrics=PEAK_DATING,
                        visit_tail=max(tail, max_age), visit_head=max_age,
                        reach=min(SCRAPE_GAP, max_age))
        labels = {(w.name, *gpu): info for w in result.inventory
                  for gpu, info in w.gpu_labels.items()}
        record = json.loads((data / "export.json").read_text(encoding="utf-8"))
        session = {"cluster": result.cluster, "since": format_rfc3339(to_ms(since)),
                   "until": format_rfc3339(to_ms(until)), "since_unix": since,
                   "until_unix": until, "duration_seconds": round(until - since, 3),
                   "prometheus": client.url, "asked": dict(asked or {}),
                   "warnings": result.warnings, "versions": record.get("versions"),
                   "dask_metrics": __version__}
        body = build(session, gather.workers, labels, _rows(data / JOBS_CSV), load_models(),
                     headroom, _rows(data / ACTIVITIES_CSV), _rows(data / GPU_BY_PREFIX_CSV))
        charts: dict[str, str] = {}
        if fmt == "html":
            files = dict(zip(result.workers, result.files, strict=True))
            body["plots"], charts = _plots(data, files, kept, to_ms(since), body, plots)
    files: list[Path] = []
    if out is not None:
        target = Path(out)
        if target.exists() and not target.is_dir():
            raise CollectorError(f"{target} exists and is not a folder: choose another one")
        target.mkdir(parents=True, exist_ok=True)
        pages = {target / REPORT_JSON: json.dumps(body, indent=2) + "\n"}
        if fmt == "html":
            pages[target / REPORT_HTML] = render_html(body, charts)
        atomic_write_texts(pages)  # both or neither: never a new page beside old numbers
        if fmt == "text":  # an earlier report's page would now sit beside other numbers
            (target / REPORT_HTML).unlink(missing_ok=True)
        files.extend(pages)
    text = render_text(body) if fmt == "text" else None
    return ReportResult(Path(out) if out is not None else None, files, body, text)
