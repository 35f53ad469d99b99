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
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from dask_metrics import __version__
from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.series import WorkerInfo
from dask_metrics.collector.model.tables import WorkerTable
from dask_metrics.collector.model.timespec import MONITOR, format_rfc3339, parse_when, to_ms
from dask_metrics.collector.output.export import export
from dask_metrics.collector.output.export_reads import Visiting
from dask_metrics.collector.output.provenance import read_provenance
from dask_metrics.collector.output.staging import fixed_names, staged, write_text
from dask_metrics.collector.output.traces import trace_of_table
from dask_metrics.collector.peaks.samples import DEFAULT_PEAK_WINDOW, PEAK_DATING, tail_of
from dask_metrics.collector.query.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.report import where
from dask_metrics.collector.report.advice import DEFAULT_HEADROOM, MOST_HEADROOM, load_models
from dask_metrics.collector.report.chart import worker_chart
from dask_metrics.collector.report.compare import BaselineError, check_baseline, compare
from dask_metrics.collector.report.gatherer import Gatherer
from dask_metrics.collector.report.model import build
from dask_metrics.collector.report.notebook import framed
from dask_metrics.collector.report.render import render_html, render_text
from dask_metrics.collector.report.tally import WorkerFacts
from dask_metrics.collector.sources.discovery import Progress
from dask_metrics.collector.sources.session_window import last_session, recorded_session, window
from dask_metrics.collector.sources.worker_series import peak_windows
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.work.pool import processes_for, worker_pool
from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV, JOBS_CSV, REPLICA_LABELS

REPORT_METRICS = ("total-mem", "mem-util", "compute-util", "peak-mem", "energy", "busy-seconds",
                  "sm-active-seconds", "tensor-active-seconds", "rmm-used", "rmm-pool")
REPORT_HTML, REPORT_JSON = "report.html", "report.json"
FORMATS = ("html", "text")
PREVIOUS = "previous"  # a baseline: the monitor session before the report's
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
    page: str | None = None  # the page (format "html")

    def _repr_html_(self) -> str | None:
        """The page inline in Jupyter: in a sandboxed frame (no script, its own styles),
        under the page's own Content Security Policy."""
        return None if self.page is None else framed(self.page)


def _rows(path: Path) -> list[dict[str, str]] | None:
    """A CSV file's rows, None where the export did not write it."""
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _where(data: Path) -> dict[str, Any]:
    """report.json's "where the time went": the largest rows of the export's activities.csv
    and gpu_by_prefix.csv (None where it wrote none), and how many each has."""
    out: dict[str, Any] = {"rows_in_export": {}}
    for key, name in (("activities", ACTIVITIES_CSV), ("gpu_by_prefix", GPU_BY_PREFIX_CSV)):
        path = data / name
        if not path.is_file():
            out[key] = None
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            out[key], out["rows_in_export"][key] = where.largest(csv.DictReader(fh), key)
    return out


class _Kept:
    """Told each worker's facts (the Gatherer's ``then``): keeps the tables of the ``most``
    workers with the highest peak memory (% of capacity) so far, for their charts (about
    0.4 MiB per GPU-hour at 1 s scrapes each: a fleet's tables are not all held at once).
    Ties go to the earlier worker."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.tables: dict[str, WorkerTable] = {}
        self._ranks: list[tuple[float, int, str]] = []  # (-percent, visit order, worker)

    def __call__(self, facts: WorkerFacts, table: WorkerTable) -> None:
        if not self.most:
            return
        percent = max((p.peak_percent or 0.0 for p in facts.job_peaks), default=0.0)
        name = facts.info.name
        self._ranks.append((-percent, len(self._ranks), name))
        self.tables[name] = table
        if len(self._ranks) > self.most:
            dropped = max(self._ranks)
            self._ranks.remove(dropped)
            del self.tables[dropped[2]]


def _plots(data: Path, files: Mapping[str, str], kept: _Kept, start: int,
           report: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Charts of the workers ``kept`` (those with the highest peak memory), in worker
    order, as (entries for report.json, {chart name: SVG})."""
    workers = [w["worker"] for w in report["session"]["workers"]]
    chosen = [w for w in workers if w in kept.tables]
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
    entries = [{"file": f"{Path(files[w]).stem}.svg", "worker": w, "what": "worker"}
               for w in chosen]
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
                asked: Mapping[str, Any] | None = None,
                baseline: str | os.PathLike[str] | Mapping[str, Any] | None = None,
                processes: int | None = 0) -> ReportResult:
    """The report of [since, until] (unix seconds): ``fmt`` "html" writes out/report.html and
    out/report.json; "text" returns the text rendering (and writes report.json where ``out``
    is given). ``plots``: how many workers to chart. ``baseline``: an earlier report to
    compare the jobs with (a folder, report.json, its dict, "previous" or a WHEN: see
    ``_earlier`` and ``_session_report``). ``processes``: how many processes reduce the
    workers beside this one, the same numbers either way (0: none; None: by the CPUs and
    the number of workers, workpool.processes_for). A pool's processes import the program's
    main module: a script that calls this with a pool needs ``if __name__ == "__main__"``
    (multiprocessing's rule), hence none by default here; the command line asks None.
    Other arguments as for ``export``. Raises CollectorError as ``export`` does,
    BaselineError for a baseline that is not a report."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "html" and out is None:
        raise ValueError("an HTML report needs a folder to write into")
    if not (isinstance(headroom, int | float) and 1 <= headroom <= MOST_HEADROOM):
        raise ValueError(f"headroom {headroom!r}: must be a number from 1 to {MOST_HEADROOM:g}")
    if plots < 0:
        raise ValueError(f"plots {plots}: must be 0 or more")
    if processes is not None and processes < 0:
        raise ValueError(f"processes {processes}: must be 0 or more")
    target = Path(out) if out is not None else None
    if target is not None and target.exists() and not target.is_dir():
        raise CollectorError(f"{target} exists and is not a folder: choose another one")
    options = {"workers": workers, "max_age": max_age, "chunk": chunk,
               "replica_labels": replica_labels, "peak_window": peak_window,
               "headroom": headroom, "processes": processes}
    earlier = _earlier(baseline) if baseline is not None and not _is_when(baseline) else None
    body, charts = _gather(client, since, until, plots=plots, draw=fmt == "html",
                           progress=progress, cluster=cluster, any_cluster=any_cluster,
                           asked=asked, **options)
    if baseline is not None:
        if earlier is None:  # a time: that session's report, computed here
            earlier = _session_report(client, str(baseline), since, body["session"]["cluster"],
                                      options)
        body["baseline"] = compare(body, *earlier)
    files: list[Path] = []
    page = render_html(body, charts) if fmt == "html" else None
    if target is not None:
        # orjson: a fleet's report.json is tens of MB, which json's encoder takes seconds for
        pages = {REPORT_JSON: orjson.dumps(body, option=orjson.OPT_INDENT_2 |
                                           orjson.OPT_NON_STR_KEYS).decode() + "\n"}
        if page is not None:
            pages[REPORT_HTML] = page
        # both or neither: never a new page beside old numbers; with the text format an
        # earlier report's page would sit beside other numbers, so it goes
        with staged(target, REPORT_JSON, _earlier_page if fmt == "text" else fixed_names
                    ) as stage:
            for name, text in pages.items():
                write_text((stage / name, text))
        files.extend(target / name for name in pages)
    text = render_text(body) if fmt == "text" else None
    return ReportResult(target, files, body, text, page)


def _earlier_page(_out: Path) -> set[str]:
    return {REPORT_HTML}


def _gather(client: PrometheusClient, since: float, until: float, *, plots: int, draw: bool,
            workers: Sequence[str] | None, max_age: float, chunk: float,
            progress: Progress | None, cluster: str | None, replica_labels: Sequence[str],
            any_cluster: bool, peak_window: float, headroom: float,
            asked: Mapping[str, Any] | None, processes: int | None
            ) -> tuple[dict[str, Any], dict[str, str]]:
    """report.json's dict of [since, until] and (``draw``) the charts of its ``plots``
    workers."""
    named = Scope(None if any_cluster else cluster, tuple(replica_labels))
    windows = peak_windows(client, to_ms(since), to_ms(until), named)
    kept = _Kept(most=plots if draw else 0)
    gather = Gatherer(REPORT_METRICS, to_ms(max_age), to_ms(since), to_ms(until),
                      to_ms(peak_window), windows, then=kept if kept.most else None)
    tail = tail_of(windows, to_ms(peak_window)) / 1000
    with tempfile.TemporaryDirectory(prefix="collector-report-") as tmp:
        data = Path(tmp) / "export"
        with ExitStack() as pools:
            def expect(workers: Sequence[WorkerInfo]) -> None:
                gather.expect(workers)
                chosen = processes_for(processes, len(workers))
                gather.pool = pools.enter_context(worker_pool(chosen))
                gather.ahead = chosen + 1  # one queued beyond the busy processes

            result = export(client, since, until, data, metrics=list(REPORT_METRICS),
                            max_age=max_age, workers=workers, chunk=chunk, progress=progress,
                            cluster=cluster, replica_labels=replica_labels,
                            any_cluster=any_cluster, visiting=Visiting(
                                gather, expect, PEAK_DATING, tail=max(tail, max_age),
                                head=max_age, worker_files=False))
            gather.finish()
        labels = {(w.name, *gpu): info for w in result.inventory
                  for gpu, info in w.gpu_labels.items()}
        record = json.loads((data / "export.json").read_text(encoding="utf-8"))
        session = {"cluster": result.cluster, "since": format_rfc3339(to_ms(since)),
                   "until": format_rfc3339(to_ms(until)), "since_unix": since,
                   "until_unix": until, "duration_seconds": round(until - since, 3),
                   "prometheus": client.url, "asked": dict(asked or {}),
                   "warnings": result.warnings, "versions": record.get("versions"),
                   "dask_metrics": __version__}
        assert gather.tally is not None  # export called expect
        body = build(session, gather.tally, labels, _rows(data / JOBS_CSV), load_models(),
                     headroom, _where(data))
        charts: dict[str, str] = {}
        if draw:
            files = dict(zip(result.workers, result.files, strict=True))
            body["plots"], charts = _plots(data, files, kept, to_ms(since), body)
    return body, charts


# ---- the baseline --------------------------------------------------------------------------


def _is_when(spec: Any) -> bool:
    """A baseline given as a time (``previous``, a WHEN) rather than an earlier report."""
    if isinstance(spec, Mapping | os.PathLike):
        return False
    text = str(spec)
    return text == PREVIOUS or not (Path(text).exists() or "/" in text or
                                    text.endswith(".json"))


def _earlier(spec: str | os.PathLike[str] | Mapping[str, Any]
             ) -> tuple[Mapping[str, Any], str]:
    """An earlier report: report.json's dict, the file, or the folder holding it."""
    if isinstance(spec, Mapping):
        return check_baseline(spec, "the baseline"), "the report given"
    path = Path(spec)
    path = path / REPORT_JSON if path.is_dir() else path
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc.strerror}") from None
    except ValueError:
        raise BaselineError(f"the baseline {path} is not JSON") from None
    body = check_baseline(body, str(path))
    s = body["session"]
    return body, f"{path}, the report of {s.get('since')} to {s.get('until')}"


def _session_report(client: PrometheusClient, spec: str, since: float, cluster: str,
                    options: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The report of the monitor session of ``cluster`` last started before ``spec``
    (``previous``: before this report's start), its numbers only."""
    if spec == PREVIOUS:
        when, before = since - 0.001, since
    else:
        try:
            found = parse_when(spec, time.time())
        except ValueError as exc:
            raise BaselineError(f"the baseline {exc}, 'previous', or a folder holding "
                                "report.json") from None
        when = time.time() if found == MONITOR else float(found)
        before = when
    scope = Scope(cluster, tuple(options["replica_labels"]))
    try:
        found_session = last_session(client, when, scope)
    except CollectorError:
        raise BaselineError(f"no monitor session of cluster {cluster!r} started before "
                            f"{format_rfc3339(to_ms(before))} to compare with") from None
    now = time.time()
    recorded = recorded_session(client, found_session.start, now, scope) or found_session
    start = recorded.start
    stop = recorded.stop if recorded.stop is not None else now
    start, stop = window(client, start, stop, scope, stretch=True, patience=0,
                         warn=lambda _: None)
    body, _ = _gather(client, start, stop, plots=0, draw=False, progress=None, cluster=cluster,
                      any_cluster=False, asked={"baseline_of": spec}, **options)
    return body, (f"the monitor session of {format_rfc3339(to_ms(start))} to "
                  f"{format_rfc3339(to_ms(stop))}")
