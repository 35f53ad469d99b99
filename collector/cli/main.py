"""``collector``: per-worker GPU series from Prometheus as CSV files, and peak GPU memory.

Every failure is one line ``collector: error: ...`` on stderr: exit 2 for bad input, 1 for a
failure while working (Prometheus unreachable, refused, or a file that cannot be written).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dask_metrics.collector.cli.monitor import run_monitor, run_watch
from dask_metrics.collector.cli.options import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    LONGEST_LOOKBACK,
    Terminal,
    cannot_write,
    duration,
    fail,
    options,
    words,
)
from dask_metrics.collector.cli.parser import build_parser
from dask_metrics.collector.errors import (
    CollectorError,
    Terminated,
    UsageError,
    raise_on_termination,
)
from dask_metrics.collector.model.timespec import MONITOR, format_rfc3339, to_ms
from dask_metrics.collector.output.export import export
from dask_metrics.collector.peaks.command import peaks
from dask_metrics.collector.peaks.table import caveats, format_table
from dask_metrics.collector.plot.figures import require_matplotlib
from dask_metrics.collector.plot.pages import PLOT_METRICS, plot_export
from dask_metrics.collector.query.ranges import check_range
from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.report.advice import MOST_HEADROOM
from dask_metrics.collector.report.build import make_report
from dask_metrics.collector.sources import session_window
from dask_metrics.collector.sources.session_window import last_session
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.collector.store.connection import load_config, resolve


def _span(client: PrometheusClient, opts: dict[str, Any], ui: Terminal, stretch: bool = True
          ) -> tuple[float, float]:
    """Resolve ``monitor`` (the last session of --cluster, or of the one cluster that has
    sessions, which --cluster then defaults to) as Monitor does (session_window), and check
    that the range is not empty. ``stretch``: see session_window.window."""
    since, until, now = opts["since"], opts["until"], opts["now"]
    if MONITOR in (since, until):
        scope = Scope(opts["cluster"], opts["replica_labels"])
        seen = session_window.await_scheduler(client, now, scope,
                                              patience=session_window.PATIENCE, warn=ui.warning)
        found = last_session(client, seen, scope)
        opts["cluster"] = found.cluster
        if found.interrupted:
            ui.warning(found.note())
        start, stop = found.start, seen  # a running session: up to now, as it stands
        if found.stop is not None:
            start, stop = session_window.window(
                client, found.start, found.stop, Scope(found.cluster, opts["replica_labels"]),
                stretch=stretch and until in (None, MONITOR), patience=session_window.PATIENCE,
                warn=ui.warning)
        if until == MONITOR or (until is None and since == MONITOR):
            until = stop
        if since == MONITOR:
            since = start
    begin, end = float(since), float(now if until is None else until)
    try:
        check_range(begin, end)
    except ValueError as exc:
        raise UsageError(f"--since/--until: {exc}") from None
    return begin, end


def _run_export(client: PrometheusClient, args: argparse.Namespace, opts: dict[str, Any],
                ui: Terminal) -> int:
    since, until = _span(client, opts, ui)
    stamp = format_rfc3339(to_ms(since))[:19].replace("-", "").replace(":", "")
    out = args.out or f"dask-metrics-{stamp}Z"
    asked = {"since": args.since, "until": args.until, "metrics": opts["metrics"],
             "step": args.step, "max_age": args.max_age, "layout": args.layout,
             "workers": opts["workers"], "chunk": args.chunk, "cluster": args.cluster,
             "format": args.format}
    result = export(client, since, until, out, metrics=opts["metrics"], step=opts["step"],
                    max_age=opts["max_age"], layout=args.layout, workers=opts["workers"],
                    chunk=opts["chunk"], progress=ui.progress, asked=asked,
                    cluster=opts["cluster"], replica_labels=opts["replica_labels"],
                    format=args.format)
    of = f" of Dask cluster {result.cluster!r}" if result.cluster else ""
    ui.info(f"wrote {len(result.files)} worker file(s){of}, {result.rows} rows, "
            f"{format_rfc3339(to_ms(since))} to {format_rfc3339(to_ms(until))}, "
            f"into {result.out}")
    if result.store_note:
        ui.info(f"note: {result.store_note}")
    return 0


def _run_peaks(client: PrometheusClient, args: argparse.Namespace, opts: dict[str, Any],
               ui: Terminal) -> int:
    since, until = _span(client, opts, ui, stretch=False)
    found = peaks(client, since, until, workers=opts["workers"], by=args.by,
                  max_age=opts["max_age"], chunk=opts["chunk"], progress=ui.progress,
                  cluster=opts["cluster"], replica_labels=opts["replica_labels"],
                  peak_window=duration(args.peak_window, "--peak-window", LONGEST_LOOKBACK))
    if args.json:
        print(json.dumps([p.to_json() for p in found], indent=2))
    else:
        print(format_table(found))
    for line in caveats(found):
        ui.warning(line)
    return 0


def _plot_files(folder: str | Path, args: argparse.Namespace, workers: list[str] | None,
                ui: Terminal) -> int:
    written = plot_export(folder, args.out, words(args.format) or [], workers,
                          progress=ui.progress, processes=args.processes)
    ui.info(f"wrote {len(written)} picture(s) into {args.out}")
    return 0


def _run_plot(client: PrometheusClient, args: argparse.Namespace, opts: dict[str, Any],
              ui: Terminal) -> int:
    require_matplotlib()  # before an export whose pictures could not be drawn
    since, until = _span(client, opts, ui)
    with tempfile.TemporaryDirectory(prefix="collector-plot-") as tmp:
        export(client, since, until, Path(tmp) / "export", metrics=list(PLOT_METRICS),
               max_age=opts["max_age"], workers=opts["workers"], chunk=opts["chunk"],
               progress=ui.progress, cluster=opts["cluster"],
               replica_labels=opts["replica_labels"])
        return _plot_files(Path(tmp) / "export", args, None, ui)


def _run_report(client: PrometheusClient, args: argparse.Namespace, opts: dict[str, Any],
                ui: Terminal) -> int:
    if args.format == "html" and not args.out:
        raise UsageError("--out DIR is required for --format html")
    if not 1 <= args.headroom <= MOST_HEADROOM:
        raise UsageError(f"--headroom {args.headroom:g}: must be from 1 to {MOST_HEADROOM:g}")
    if args.plots < 0:
        raise UsageError(f"--plots {args.plots}: must be 0 or more")
    since, until = _span(client, opts, ui)
    asked = {"since": args.since, "until": args.until, "workers": opts["workers"],
             "cluster": args.cluster, "headroom": args.headroom, "format": args.format,
             "plots": args.plots, "baseline": args.baseline}
    result = make_report(client, since, until, args.out, fmt=args.format,
                         workers=opts["workers"], max_age=opts["max_age"], chunk=opts["chunk"],
                         progress=ui.progress, cluster=opts["cluster"],
                         replica_labels=opts["replica_labels"],
                         peak_window=duration(args.peak_window, "--peak-window", LONGEST_LOOKBACK),
                         headroom=args.headroom, plots=args.plots, asked=asked,
                         baseline=args.baseline, processes=args.processes)
    if result.text is not None:
        print(result.text, end="")
    if result.out is not None:
        ui.info(f"wrote {', '.join(str(f) for f in result.files)}")
    return 0


COMMANDS: dict[str, Callable[[PrometheusClient, argparse.Namespace, dict[str, Any], Terminal],
                             int]] = {"export": _run_export, "peaks": _run_peaks, "plot": _run_plot,
                                      "report": _run_report}


def main(argv: list[str] | None = None) -> int:
    raise_on_termination()
    try:
        args = build_parser().parse_args(argv)
        if args.command == "monitor":
            return run_monitor(args)
        if args.command == "watch":
            return run_watch(args, vars(args))
        opts = options(args)
        if args.command == "plot" and not (args.csv or args.since):
            raise UsageError("--since WHEN or --csv DIR is required")
        if getattr(args, "processes", None) is not None and args.processes < 0:
            raise UsageError(f"--processes {args.processes}: must be 0 or more")
    except UsageError as exc:
        return fail(EXIT_USAGE, exc)
    except CollectorError as exc:
        return fail(EXIT_FAILURE, exc)
    except KeyboardInterrupt:
        return fail(EXIT_INTERRUPTED, "interrupted")
    ui = Terminal(args.quiet)
    try:
        if args.command == "plot" and args.csv:
            return _plot_files(args.csv, args, opts["workers"], ui)
        config = load_config(args.config) if args.config else None
        settings = resolve(vars(args), os.environ, config)
        with PrometheusClient(settings, on_warning=ui.warning) as client:
            return COMMANDS[args.command](client, args, opts, ui)
    except UsageError as exc:
        return fail(EXIT_USAGE, exc)
    except CollectorError as exc:
        ui.clear()
        return fail(EXIT_FAILURE, exc)
    except OSError as exc:
        ui.clear()
        return fail(EXIT_FAILURE, cannot_write(exc))
    except KeyboardInterrupt:
        ui.clear()
        return fail(EXIT_INTERRUPTED, "interrupted; no file was written")
    except Terminated as exc:
        ui.clear()
        name = signal.Signals(exc.signum).name
        return fail(128 + exc.signum, f"stopped by {name}; no file was written")


if __name__ == "__main__":
    sys.exit(main())
