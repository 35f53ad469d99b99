"""``collector plot``: an export folder's pictures, one per worker and format and the cluster
page, read a piece of a worker file at a time and published together or not at all. Needs
the optional extra ``dask-metrics[plot]`` (matplotlib), imported only in this room so that
the rest of the collector does without it.
"""

from __future__ import annotations

import fnmatch
import os
from collections import deque
from collections.abc import Collection, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dask_metrics.collector.charts.rows import carried, chart_rows
from dask_metrics.collector.errors import CollectorError, UsageError
from dask_metrics.collector.model.tables import joined
from dask_metrics.collector.output.provenance import Provenance, read_provenance
from dask_metrics.collector.output.staging import fixed_names, staged
from dask_metrics.collector.output.traces import (
    WorkerFile,
    WorkerTrace,
    export_files,
    open_worker_file,
)
from dask_metrics.collector.plot.figures import (
    BUCKETS,
    MAX_LINES,
    cluster_figure,
    require_matplotlib,
    worker_figure,
)
from dask_metrics.collector.plot.overviews import Overview, OverviewFold, Spread
from dask_metrics.collector.sources.discovery import Progress
from dask_metrics.collector.work.pool import processes_for, run_in, take_in_order, worker_pool

FORMATS = ("png", "svg")


# zlib level 1 instead of PIL's 6: 24 ms instead of 57 to compress a worker's picture, for a
# file 10 % larger
SAVE: dict[str, dict[str, Any]] = {"png": {"pil_kwargs": {"compress_level": 1}}}


CLUSTER = "cluster"  # the overview's file name; a worker of that name is "worker-cluster"


PLOT_METRICS = ("total-mem", "mem-util", "compute-util", "peak-mem", "mem-bw-util")


def _save(fig: Any, stem: Path, formats: Sequence[str]) -> list[Path]:
    """The figure in each format; laid out once, for the first."""
    written = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        with open(path, "wb") as fh:
            fig.savefig(fh, format=fmt, **SAVE.get(fmt, {}))
            fh.flush()
            os.fsync(fh.fileno())
        fig.set_layout_engine("none")  # keeps the positions the layout found
        written.append(path)
    return written


def plot_export(folder: str | os.PathLike[str], out: str | os.PathLike[str],
                formats: Sequence[str] = ("png",),
                workers: Sequence[str] | None = None, *,
                pictures: Collection[str] | None = None, overview: bool = True,
                progress: Progress | None = None, processes: int | None = 0
                ) -> list[Path]:
    """Plot a tidy export folder into ``out``: one picture per worker and format (only of
    the workers named in ``pictures`` when given), and the cluster overview (``overview``).
    They appear together or not at all (staging.staged); returns their paths.
    ``progress(done, total, worker, None)`` is called before each worker is read.

    ``processes``: how many processes read and draw the workers (0: none, this one does;
    None, as the command line: as many as the CPUs, at most workpool.MOST_PROCESSES, none
    below workpool.FEWEST_WORKERS workers): a picture is a few tenths of a second of
    matplotlib. The pictures and the page are the same either way. A script that asks for
    a pool needs ``if __name__ == "__main__"`` (the pool's processes import it)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(f"--format: {', '.join(unknown) or 'none given'} (known: "
                         f"{', '.join(FORMATS)})")
    require_matplotlib()
    provenance = read_provenance(folder)
    chosen = [f for f in map(open_worker_file, export_files(folder))
              if not workers or any(fnmatch.fnmatchcase(f.worker, w) for w in workers)]
    if not chosen:
        raise CollectorError(f"no worker in {folder} matches {', '.join(workers or [])}")
    # the page's time axis, known before any file is read: each file's last row
    span = max(f.last or 0 for f in chosen) / 1000
    spread = Spread(span, BUCKETS) if overview and len(chosen) > MAX_LINES else None
    target = Path(out)
    written: list[Path] = []
    overviews: list[Overview] = []
    asked = processes_for(processes, len(chosen), spare=0)
    with staged(target, manifest="", earlier=fixed_names) as stage, \
            worker_pool(asked) as pool:  # all pictures or none
        pending: deque[tuple[Future[Drawn], None]] = deque()

        def take(drawn: Drawn, _: None) -> None:  # in the export's order
            paths, seen, fold = drawn
            written.extend(paths)
            if seen is not None:
                overviews.append(seen)
            if spread is not None and fold is not None:
                spread.add(fold)

        for done, found in enumerate(chosen):  # a piece of one worker's file at a time
            if progress:
                progress(done, len(chosen), found.worker, None)
            drawn, pool = run_in(pool, _draw_worker, found, span, provenance, pictures,
                                 stage, formats, overview, spread is None)
            pending.append((drawn, None))
            take_in_order(pending, asked, take, "plot")
        take_in_order(pending, 0, take, "plot")
        if progress:
            progress(len(chosen), len(chosen), "", None)
        if overview:
            written += _save(cluster_figure(overviews, provenance, spread), stage / CLUSTER,
                             formats)
    return [target / path.name for path in written]


Drawn = tuple[list[Path], Overview | None, OverviewFold | None]
"""A worker's pictures, and what the cluster page draws of it (its overview, its fold for
the spread)."""


def _draw_worker(found: WorkerFile, span: float, provenance: Provenance,
                 pictures: Collection[str] | None, stage: Path, formats: Sequence[str],
                 overview: bool, lines: bool) -> Drawn:
    """One worker read (``_read``), its pictures saved into ``stage`` (if ``pictures``
    names it), its overview (``lines``: with its own lines) and fold (without) for the
    cluster page: in a pool's process, or in the collector's."""
    trace, fold = _read(found, span)
    trace = provenance.own(trace)
    paths = []
    if pictures is None or trace.worker in pictures:
        stem = f"worker-{CLUSTER}" if trace.stem == CLUSTER else trace.stem
        paths = _save(worker_figure(trace, provenance), stage / stem, formats)
    if not overview:
        return paths, None, None
    return paths, fold.overview(trace, lines=lines), None if lines else fold


def _read(found: WorkerFile, span: float) -> tuple[WorkerTrace, OverviewFold]:
    """A worker file read a piece at a time: the rows its picture draws (``chart_rows``,
    its stops marked) and its overview on a time axis of ``span`` seconds."""
    fold = OverviewFold(span, BUCKETS)
    rows = []
    before = None
    for piece in found.pieces():
        rows.append(chart_rows(piece, found.metrics, 0, found.last or 0, before, BUCKETS))
        before = carried(piece, before)
        fold.add(piece, found.metrics)
    return found.trace(joined(rows)), fold
