"""``collector``: per-worker GPU series from Prometheus as CSV files, and peak GPU memory.

Every failure is one line ``collector: error: ...`` on stderr: exit 2 for bad input, 1 for a
failure while working (Prometheus unreachable, refused, or a file that cannot be written).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from dask_metrics import __version__
from dask_metrics.collector import session_window
from dask_metrics.collector.columns import DEFAULT_NAMES, NAMES, WORKER_COLUMNS, select
from dask_metrics.collector.connection import ENV_URL, load_config, resolve
from dask_metrics.collector.connection import OPTIONS as CONNECTION_OPTIONS
from dask_metrics.collector.errors import (
    CollectorError,
    Terminated,
    UsageError,
    raise_on_termination,
)
from dask_metrics.collector.errors import option as long_option
from dask_metrics.collector.export import export
from dask_metrics.collector.fetch import Scope
from dask_metrics.collector.layouts import LAYOUTS
from dask_metrics.collector.monitor import Monitor
from dask_metrics.collector.peaks import BY, DEFAULT_PEAK_WINDOW, caveats, format_table, peaks
from dask_metrics.collector.plot import FORMATS, PLOT_METRICS, plot_export, require_matplotlib
from dask_metrics.collector.promapi import PrometheusClient
from dask_metrics.collector.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE, check_range
from dask_metrics.collector.report.advice import DEFAULT_HEADROOM, MOST_HEADROOM
from dask_metrics.collector.report.build import DEFAULT_PLOTS, make_report
from dask_metrics.collector.report.build import FORMATS as REPORT_FORMATS
from dask_metrics.collector.session_window import last_session
from dask_metrics.collector.timespec import (
    MONITOR,
    format_duration,
    format_rfc3339,
    parse_positive_duration,
    parse_when,
    to_ms,
)
from dask_metrics.collector.transport import COMPRESSIONS, MAX_TIMEOUT, valid_timeout
from dask_metrics.collector.watch import (
    DEFAULT_POLL,
    MAX_POLL,
    MIN_POLL,
    WatchOptions,
    watch,
)
from dask_metrics.contract import REPLICA_LABELS

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

WHEN_HELP = ("RFC 3339 (2024-05-01T12:00:00Z), unix seconds, a duration back from now "
             "(90s, 15m, 2h), 'now', or 'monitor' (the last monitor session)")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors raise UsageError: one ``error:`` line, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _span_parent(required: bool) -> argparse.ArgumentParser:
    """Time range and worker options; ``--since`` is optional where ``--csv`` can replace it."""
    span = argparse.ArgumentParser(add_help=False)
    group = span.add_argument_group("time range and workers")
    group.add_argument("--since", metavar="WHEN", required=required, help=f"start: {WHEN_HELP}")
    group.add_argument("--until", metavar="WHEN",
                       help="end (default now, or the monitor session's stop with --since "
                       "monitor)")
    group.add_argument("--workers", metavar="NAME", nargs="+",
                       help="only these workers (names or globs such as 'gpu-*'; commas work)")
    group.add_argument("--cluster", metavar="NAME",
                       help="the Dask cluster (its dask_cluster label; '' for series without "
                       "one); needed when the range holds several")
    group.add_argument("--max-age", metavar="DURATION", default=format_duration(DEFAULT_MAX_AGE),
                       help="how old a sample may be and still describe a later time: a "
                       "--step grid point, or the scheduler's job/DAG (default %(default)s)")
    group.add_argument("--chunk", metavar="DURATION", default=format_duration(DEFAULT_CHUNK),
                       help="time range of one query, halved when Prometheus finds it too "
                       "big (default %(default)s)")
    return span


def build_parser() -> argparse.ArgumentParser:
    conn = argparse.ArgumentParser(add_help=False)
    group = conn.add_argument_group("connection (Prometheus, Thanos, Mimir, VictoriaMetrics)")
    group.add_argument("--prometheus", metavar="URL",
                       help=f"base URL of the API, path prefix included; user:password@ works "
                       f"(or {ENV_URL}, or 'prometheus:' in --config)")
    group.add_argument("--config", metavar="FILE",
                       help="YAML file with keys prometheus, user, password-file, "
                       "bearer-token-file, headers, ca-file, cert, key, timeout, retries, "
                       "compression")
    group.add_argument("--user", metavar="NAME", help="basic auth user (with --password-file)")
    group.add_argument("--password-file", metavar="FILE", help="file holding the password")
    group.add_argument("--bearer-token-file", metavar="FILE", help="file holding a bearer token")
    group.add_argument("--header", metavar="NAME:VALUE", action="append",
                       help="extra HTTP header, repeatable (e.g. 'X-Scope-OrgID: tenant-1')")
    group.add_argument("--ca-file", metavar="FILE", help="CA bundle to verify the server")
    group.add_argument("--cert", metavar="FILE", help="client certificate (PEM)")
    group.add_argument("--key", metavar="FILE", help="key of the client certificate (PEM)")
    group.add_argument("--timeout", metavar="SECONDS",
                       help="read timeout, or CONNECT,READ (default 5,60)")
    group.add_argument("--retries", metavar="N",
                       help="retries on connection errors, 429 and 5xx, with backoff (default 3)")
    group.add_argument("--compression", choices=COMPRESSIONS,
                       help="response compression: gzip (default) or none, faster where the "
                       "network is fast (loopback, a LAN)")
    group.add_argument("--replica-label", metavar="NAME", action="append",
                       help="a label that tells HA replicas apart, besides prometheus_replica "
                       "and replica (repeatable): series differing only by these are one")
    group.add_argument("--quiet", action="store_true",
                       help="no progress and no summary (warnings and errors still show)")

    span, span_or_csv = _span_parent(required=True), _span_parent(required=False)

    parser = OneLineParser(prog="collector", description="Per-worker GPU series from Prometheus as "
                     "CSV files, and peak GPU memory.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    exp = commands.add_parser(
        "export", parents=[span, conn], help="write per-worker CSV files",
        description="Write one CSV per worker, workers.csv and export.json into --out.")
    exp.add_argument("--out", metavar="DIR",
                     help="output folder (default dask-metrics-<start time>)")
    exp.add_argument("--metrics", metavar="NAME", nargs="+",
                     help=f"metric columns: {', '.join(NAMES)} (default: all but the "
                     f"worker's own {', '.join(c.name for c in WORKER_COLUMNS)})")
    exp.add_argument("--step", metavar="DURATION",
                     help="resample on a grid of this step (default: raw samples)")
    exp.add_argument("--layout", choices=LAYOUTS, default="tidy",
                     help="tidy: a row per time and GPU (default); seed: the original "
                     "dask-metrics files")

    pk = commands.add_parser(
        "peaks", parents=[span, conn], help="peak GPU memory per worker and GPU",
        description="Peak GPU memory per worker and GPU, when it happened and during which "
        "job/DAG, from dask_gpu_memory_peak_bytes (spikes between scrapes count).")
    pk.add_argument("--json", action="store_true", help="a JSON list instead of a table")
    pk.add_argument("--by", choices=BY, default="gpu",
                    help="gpu: one peak per worker and GPU (default); job: one per job too")
    pk.add_argument("--peak-window", metavar="DURATION",
                    default=format_duration(DEFAULT_PEAK_WINDOW),
                    help="the peak window of exporters that do not say theirs (older "
                    "ones; the others export it): in that long after --since, used memory is "
                    "taken, so no peak is from before it (default %(default)s)")

    plt = commands.add_parser(
        "plot", parents=[span_or_csv, conn], help="PNG/SVG pictures per worker and of the cluster",
        description="Per worker: GPU utilisation and memory over time, the job/DAG phases "
        "shaded; and a cluster overview (cluster.png). From Prometheus (--since), or from a "
        "folder written by 'collector export' (--csv). Needs 'dask-metrics[plot]'.")
    plt.add_argument("--out", metavar="DIR", required=True, help="folder for the pictures")
    plt.add_argument("--csv", metavar="DIR",
                     help="plot this export folder (tidy layout) instead of asking Prometheus")
    plt.add_argument("--format", metavar="FORMAT", nargs="+", default=["png"],
                     help=f"picture formats: {', '.join(FORMATS)} (default png)")

    rep = commands.add_parser(
        "report", parents=[span, conn], help="one page per session: jobs, peaks, energy, advice",
        description="The session report: report.html (one self-contained page) and "
        "report.json (every number on it) in --out; with --format text, the same sections "
        "on the terminal.")
    rep.add_argument("--out", metavar="DIR", help="folder for report.html and report.json "
                     "(needed for html; with text, report.json is written there too)")
    rep.add_argument("--format", choices=REPORT_FORMATS, default="html",
                     help="html: the page (default); text: print the sections")
    rep.add_argument("--headroom", metavar="FACTOR", type=float, default=DEFAULT_HEADROOM,
                     help="GPU memory a job needs = its peak x this (default %(default)s)")
    rep.add_argument("--peak-window", metavar="DURATION",
                     default=format_duration(DEFAULT_PEAK_WINDOW), help="as for peaks")
    rep.add_argument("--baseline", metavar="WHEN|FOLDER",
                     help="compare each job with the job of the same name in an earlier "
                     "report: a folder holding its report.json (or the file), 'previous' (the "
                     "monitor session before this range), or a time in an earlier monitor "
                     "session (the last one started before it)")
    rep.add_argument("--plots", metavar="N", type=int, default=DEFAULT_PLOTS,
                     help="plot the N workers with the highest peak memory (default "
                     "%(default)s; 0: none, the fastest report)")

    sched = argparse.ArgumentParser(add_help=False)
    sched.add_argument("--scheduler", metavar="ADDR",
                       help="the Dask scheduler, e.g. tcp://scheduler:8786 (default: Dask's "
                       "scheduler-address config, DASK_SCHEDULER_ADDRESS)")
    sched.add_argument("--connect-timeout", metavar="SECONDS", type=float, default=10.0,
                       help="how long to try reaching the scheduler (default %(default)s)")

    mon = commands.add_parser(
        "monitor", help="start, stop or inspect a monitor session on the scheduler",
        description="Monitor sessions live on the scheduler (dask_metrics.scheduler preload): "
        "any client may start one and any other stop it.")
    actions = mon.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser("start", parents=[sched], help="start a session")
    start.add_argument("--metrics", metavar="NAME", nargs="+",
                       help=f"metrics the session tracks: {', '.join(NAMES)} (default "
                       f"{', '.join(DEFAULT_NAMES)})")
    stop = actions.add_parser("stop", parents=[sched],
                              help="stop the session once running DAGs have finished")
    stop.add_argument("--force", action="store_true", help="stop now, without waiting")
    stop.add_argument("--any-owner", action="store_true",
                      help="stop the running session even if another user or host started it")
    stop.add_argument("--timeout", metavar="SECONDS", type=float,
                      help="wait at most this long for running DAGs")
    actions.add_parser("status", parents=[sched], help="the session and the current job/DAG")
    new_job = actions.add_parser("new-job", parents=[sched],
                                 help="start the next job (scheduler --job-mode manual)")
    new_job.add_argument("--name", help="the job's name (job_name label)")
    for action in actions.choices.values():
        action.add_argument("--json", action="store_true", help="print the scheduler's reply")

    wat = commands.add_parser(
        "watch", parents=[sched, conn], help="export every monitor session when it stops",
        description="A service: each monitor session is exported once, into its own folder "
        "under --out, when it stops. Survives scheduler and Prometheus restarts.")
    wat.add_argument("--out", metavar="DIR", required=True, help="folder of session folders")
    wat.add_argument("--layout", choices=LAYOUTS, default="tidy", help="as for export")
    wat.add_argument("--step", metavar="DURATION", help="as for export")
    wat.add_argument("--workers", metavar="NAME", nargs="+", help="as for export")
    wat.add_argument("--cluster", metavar="NAME",
                     help="the Dask cluster's name (default: the scheduler tells)")
    wat.add_argument("--poll", metavar="DURATION", default=format_duration(DEFAULT_POLL),
                     help="how often to ask the scheduler (default %(default)s; from "
                     f"{format_duration(MIN_POLL)} to {format_duration(MAX_POLL)})")
    wat.add_argument("--once", action="store_true",
                     help="export what is pending and exit (exit 1 if that failed)")
    return parser


class Terminal:
    """Progress on stderr only when it is a terminal and not --quiet; warnings always."""

    def __init__(self, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = not quiet and self.stream.isatty()
        self._line = False

    def progress(self, done: int, total: int, worker: str) -> None:
        if not self.live:
            return
        if done >= total:
            self.clear()
            return
        self.stream.write(f"\rcollector: worker {done + 1}/{total}: {worker}\033[K")
        self.stream.flush()
        self._line = True

    def warning(self, message: str) -> None:
        self.clear()
        print(f"collector: warning: {message}", file=self.stream)

    def info(self, message: str) -> None:
        if not self.quiet:
            print(f"collector: {message}", file=self.stream)

    def clear(self) -> None:
        """End a progress line, so that what follows starts on a clean line."""
        if self._line:
            self.stream.write("\r\033[K")
            self._line = False


def _words(values: Sequence[str] | None) -> list[str] | None:
    """``--metrics a b,c`` -> [a, b, c]."""
    if values is None:
        return None
    return [w for v in values for w in v.split(",") if w.strip()]


#: The longest --max-age and --peak-window: a sample a day old says nothing about now, and
#: the samples fetched before the range grow with them.
LONGEST_LOOKBACK = 86400.0
#: The shortest --chunk: a chunk is one query per series, and Prometheus answers an hour of
#: one-second samples in one.
SHORTEST_CHUNK = 60.0


def _duration(text: str | None, option: str, at_most: float | None = None,
              at_least: float | None = None) -> float | None:
    if text is None:
        return None
    try:
        seconds = parse_positive_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if at_most is not None and seconds > at_most:
        raise UsageError(f"{option}: {text!r} is too long (at most {format_duration(at_most)})")
    if at_least is not None and seconds < at_least:
        raise UsageError(f"{option}: {text!r} is too short (at least "
                         f"{format_duration(at_least)})")
    return seconds


def _when(text: str | None, option: str, now: float) -> float | str | None:
    if text is None:
        return None
    try:
        return parse_when(text, now)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


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
             "workers": opts["workers"], "chunk": args.chunk, "cluster": args.cluster}
    result = export(client, since, until, out, metrics=opts["metrics"], step=opts["step"],
                    max_age=opts["max_age"], layout=args.layout, workers=opts["workers"],
                    chunk=opts["chunk"], progress=ui.progress, asked=asked,
                    cluster=opts["cluster"], replica_labels=opts["replica_labels"])
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
                  peak_window=_duration(args.peak_window, "--peak-window", LONGEST_LOOKBACK))
    if args.json:
        print(json.dumps([p.to_json() for p in found], indent=2))
    else:
        print(format_table(found))
    for line in caveats(found):
        ui.warning(line)
    return 0


def _plot_files(folder: str | Path, args: argparse.Namespace, workers: list[str] | None,
                ui: Terminal) -> int:
    written = plot_export(folder, args.out, _words(args.format) or [], workers)
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
                         peak_window=_duration(args.peak_window, "--peak-window", LONGEST_LOOKBACK),
                         headroom=args.headroom, plots=args.plots, asked=asked,
                         baseline=args.baseline)
    if result.text is not None:
        print(result.text, end="")
    if result.out is not None:
        ui.info(f"wrote {', '.join(str(f) for f in result.files)}")
    return 0


COMMANDS: dict[str, Callable[[PrometheusClient, argparse.Namespace, dict[str, Any], Terminal],
                             int]] = {"export": _run_export, "peaks": _run_peaks, "plot": _run_plot,
                                      "report": _run_report}


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """Parse every value that can be checked before talking to Prometheus."""
    now = time.time()
    metrics = _words(getattr(args, "metrics", None))
    try:
        select(metrics)
    except ValueError as exc:
        raise UsageError(f"--metrics: {exc}") from None
    return {"now": now, "since": _when(args.since, "--since", now),
            "until": _when(args.until, "--until", now), "metrics": metrics,
            "workers": _words(args.workers),
            "step": _duration(getattr(args, "step", None), "--step"),
            "max_age": _duration(args.max_age, "--max-age", LONGEST_LOOKBACK),
            "chunk": _duration(args.chunk, "--chunk", at_least=SHORTEST_CHUNK),
            "cluster": getattr(args, "cluster", None),
            "replica_labels": _replica_labels(args)}


def _replica_labels(args: argparse.Namespace) -> tuple[str, ...]:
    """The built-in replica labels and those of --replica-label (commas work)."""
    given = _words(getattr(args, "replica_label", None)) or []
    bad = [name for name in given if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name)]
    if bad:
        raise UsageError(f"--replica-label: {bad[0]!r} is not a label name")
    return tuple(dict.fromkeys([*REPLICA_LABELS, *given]))


#: Keywords of the Python API whose command-line option is spelled otherwise.
OPTION_OF = {"url": "--prometheus", "password": "--password-file",
             "bearer_token": "--bearer-token-file", "read_timeout": "--timeout",
             "connect_timeout": "--timeout"}


def cli_option(name: str) -> str:
    """The option that sets the keyword ``name`` (errors.setting)."""
    return OPTION_OF.get(name) or long_option(name)


def _fail(code: int, message: object) -> int:
    text = message.worded(cli_option) if isinstance(message, CollectorError) else message
    print(f"collector: error: {text}", file=sys.stderr)
    return code


def _cannot_write(exc: OSError) -> str:
    """One line for an output that cannot be written, naming it (export's --out, watch's)."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"cannot write the output: {where}{exc.strerror or exc}"


def _scheduler_client(args: argparse.Namespace) -> Any:
    """A Client of the scheduler named by --scheduler or Dask's config, after a bounded probe:
    distributed's own Client would start a LocalCluster without an address, and waits
    unbounded on a port that accepts connections but speaks no Dask (a dashboard)."""
    import dask.config

    address = args.scheduler or dask.config.get("scheduler-address", None)
    if not address:
        raise UsageError("--scheduler ADDR is required (or Dask's scheduler-address config, "
                         "e.g. DASK_SCHEDULER_ADDRESS=tcp://scheduler:8786)")
    if not valid_timeout(args.connect_timeout):
        raise UsageError(f"--connect-timeout {args.connect_timeout:g}: must be more than 0 and "
                         f"at most {MAX_TIMEOUT:g} seconds")
    _probe_scheduler(str(address), args.connect_timeout)
    from distributed import Client  # only the monitor commands pay for importing distributed

    try:
        return Client(address, timeout=args.connect_timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise CollectorError(f"cannot reach the Dask scheduler at {address}: "
                             f"{str(exc).splitlines()[0] if str(exc) else 'timed out'}") from None


def _probe_scheduler(address: str, timeout: float) -> None:
    """Connect and ask for the scheduler's identity, all within ``timeout`` seconds."""
    import asyncio

    from distributed.comm import connect

    async def identity() -> Any:
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), timeout))
    except (TimeoutError, asyncio.TimeoutError):
        raise CollectorError(f"no Dask scheduler answered at {address} within {timeout:g} s "
                             "(is it the scheduler's port, 8786, not its dashboard's?): "
                             "check --scheduler, or raise --connect-timeout") from None
    except (ValueError, TypeError) as exc:  # not an address at all
        raise UsageError(f"--scheduler {address}: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CollectorError(f"cannot reach the Dask scheduler at {address}: {reason}"
                             ) from None
    except Exception as exc:  # a peer that is not Dask: its bytes do not decode as messages
        raise CollectorError(f"{address} did not answer as a Dask scheduler "
                             f"({type(exc).__name__}): check --scheduler") from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        kind = reply.get("type") if isinstance(reply, dict) else type(reply).__name__
        raise CollectorError(f"{address} is a Dask {kind}, not the scheduler: check --scheduler")


def _describe(session: dict[str, Any] | None) -> str:
    if not session:
        return "no monitor session yet"
    start = format_rfc3339(to_ms(session["start"]))
    stop = format_rfc3339(to_ms(session["stop"])) if session.get("stop") else "running"
    metrics = ", ".join(session.get("metrics") or ()) or "the default metrics"
    which = "" if session.get("id") is None else f" {session['id']}"
    return f"monitor session{which}: {start} to {stop} ({metrics})"


@contextmanager
def _warnings_as_lines(ui: Terminal) -> Iterator[None]:
    """Monitor's warnings (a Python API's) as the command line's one-line warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *_, **__: ui.warning(str(message))
        yield


def _run_monitor(args: argparse.Namespace) -> int:
    with _warnings_as_lines(Terminal(quiet=False)):
        return _monitor_action(args)


def _monitor_action(args: argparse.Namespace) -> int:
    metrics = _words(getattr(args, "metrics", None))
    try:
        select(metrics)
    except ValueError as exc:
        raise UsageError(f"--metrics: {exc}") from None
    with _scheduler_client(args) as client:
        monitor = Monitor(client)  # owned, like a Monitor's sessions, by the user on this host
        if args.action == "start":
            running = (monitor.status().get("session") or {})
            if running and not running.get("stop"):  # say it before attach() would
                raise CollectorError(f"{_describe(running)} is already running: "
                                     "'collector monitor stop' it first")
            if metrics:
                monitor.attach(metrics)
            reply = monitor.start()
            text = f"started {_describe(reply['session'])}"
        elif args.action == "stop":
            reply = monitor.stop(force=args.force, timeout=args.timeout,
                                 any_owner=args.any_owner)
            text = (f"{_describe(reply['session'])} ended with its scheduler (interrupted): "
                    "nothing left to stop; its data: --since monitor" if reply.get("interrupted")
                    else f"stopped {_describe(reply['session'])}")
        elif args.action == "new-job":
            job_id = monitor.new_job(args.name)
            reply, text = {"ok": True, "job_id": job_id}, f"job {job_id} started"
        else:
            reply = monitor.status()
            job = reply.get("current_job", -1)
            now = (f"job {job}, DAG {reply.get('current_dag')}" if job is not None and job >= 0
                   else "idle")
            text = f"{_describe(reply.get('session'))}; cluster {now} ({reply['job_mode']} mode)"
    print(json.dumps(reply, indent=2, default=str) if args.json else text)
    return 0


def _run_watch(args: argparse.Namespace, settings_cli: dict[str, Any]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s collector watch: %(message)s")
    options = WatchOptions(out=Path(args.out), layout=args.layout,
                           step=_duration(args.step, "--step"), workers=_words(args.workers),
                           poll=_duration(args.poll, "--poll", MAX_POLL, MIN_POLL))
    stop = threading.Event()  # SIGINT, SIGTERM and SIGHUP stop it by raising (see watch)
    connection = {k: v for k, v in settings_cli.items() if k in CONNECTION_KEYS}
    replica_labels = _replica_labels(args)
    try:
        return watch(lambda: _scheduler_client(args),
                     lambda client: Monitor(client, config=args.config, cluster=args.cluster,
                                            replica_labels=replica_labels, **connection),
                     options, stop, once=args.once)
    except OSError as exc:  # --out, checked up front: later failures are retried
        raise CollectorError(_cannot_write(exc)) from None


CONNECTION_KEYS = ("prometheus", *CONNECTION_OPTIONS)


def main(argv: list[str] | None = None) -> int:
    raise_on_termination()
    try:
        args = build_parser().parse_args(argv)
        if args.command == "monitor":
            return _run_monitor(args)
        if args.command == "watch":
            return _run_watch(args, vars(args))
        opts = _options(args)
        if args.command == "plot" and not (args.csv or args.since):
            raise UsageError("--since WHEN or --csv DIR is required")
    except UsageError as exc:
        return _fail(EXIT_USAGE, exc)
    except CollectorError as exc:
        return _fail(EXIT_FAILURE, exc)
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted")
    ui = Terminal(args.quiet)
    try:
        if args.command == "plot" and args.csv:
            return _plot_files(args.csv, args, opts["workers"], ui)
        config = load_config(args.config) if args.config else None
        settings = resolve(vars(args), os.environ, config)
        with PrometheusClient(settings, on_warning=ui.warning) as client:
            return COMMANDS[args.command](client, args, opts, ui)
    except UsageError as exc:
        return _fail(EXIT_USAGE, exc)
    except CollectorError as exc:
        ui.clear()
        return _fail(EXIT_FAILURE, exc)
    except OSError as exc:
        ui.clear()
        return _fail(EXIT_FAILURE, _cannot_write(exc))
    except KeyboardInterrupt:
        ui.clear()
        return _fail(EXIT_INTERRUPTED, "interrupted; no file was written")
    except Terminated as exc:
        ui.clear()
        name = signal.Signals(exc.signum).name
        return _fail(128 + exc.signum, f"stopped by {name}; no file was written")


if __name__ == "__main__":
    sys.exit(main())
