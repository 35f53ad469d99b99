"""The command line's options, declared for argparse: ``build_parser``."""

from __future__ import annotations

import argparse

from dask_metrics import __version__
from dask_metrics.collector.errors import UsageError
from dask_metrics.collector.model.columns import DEFAULT_NAMES, NAMES, WORKER_COLUMNS
from dask_metrics.collector.model.timespec import format_duration
from dask_metrics.collector.monitor.options import STOP_TIMEOUT_OPTION
from dask_metrics.collector.monitor.watch import (
    DEFAULT_POLL,
    MAX_POLL,
    MIN_POLL,
)
from dask_metrics.collector.output.csv_lines import LAYOUTS
from dask_metrics.collector.output.parquet import EXPORT_FORMATS
from dask_metrics.collector.peaks.command import BY
from dask_metrics.collector.peaks.samples import DEFAULT_PEAK_WINDOW
from dask_metrics.collector.plot.pages import FORMATS
from dask_metrics.collector.query.ranges import DEFAULT_CHUNK, DEFAULT_MAX_AGE
from dask_metrics.collector.report.advice import DEFAULT_HEADROOM
from dask_metrics.collector.report.build import DEFAULT_PLOTS
from dask_metrics.collector.report.build import FORMATS as REPORT_FORMATS
from dask_metrics.collector.store.connection import CONFIG_KEYS, CONNECTION, ENV_URL
from dask_metrics.collector.work.pool import FEWEST_WORKERS, MOST_PROCESSES
from dask_metrics.options import add_arguments

WHEN_HELP = ("RFC 3339 (2024-05-01T12:00:00Z), unix seconds, a duration back from now "
             "(90s, 15m, 2h), 'now', or 'monitor' (the last monitor session)")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors raise UsageError: one ``error:`` line, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def span_parent(required: bool) -> argparse.ArgumentParser:
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
                       "big, and of what an export holds in memory at once (default "
                       "%(default)s)")
    return span


def build_parser() -> argparse.ArgumentParser:
    conn = argparse.ArgumentParser(add_help=False)
    group = conn.add_argument_group("connection (Prometheus, Thanos, Mimir, VictoriaMetrics)")
    group.add_argument("--prometheus", metavar="URL",
                       help=f"base URL of the API, path prefix included; user:password@ works "
                       f"(or {ENV_URL}, or 'prometheus:' in --config)")
    group.add_argument("--config", metavar="FILE",
                       help=f"YAML file with keys {', '.join(CONFIG_KEYS)}")
    add_arguments(group, CONNECTION)
    group.add_argument("--replica-label", metavar="NAME", action="append",
                       help="a label that tells HA replicas apart, besides prometheus_replica "
                       "and replica (repeatable): series differing only by these are one")
    group.add_argument("--quiet", action="store_true",
                       help="no progress and no summary (warnings and errors still show)")

    span, span_or_csv = span_parent(required=True), span_parent(required=False)

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
    exp.add_argument("--format", choices=EXPORT_FORMATS, default="csv",
                     help="csv (default): a file per worker; parquet: one Parquet dataset of "
                     "the tidy rows partitioned by worker, in samples/ (needs pyarrow)")

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
    _processes(plt, "read and draw the workers' pictures", "as many as the CPUs", "pictures")

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
    _processes(rep, "compute the workers' figures while this one reads the next",
               "one fewer than the CPUs", "numbers")

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
    stop.add_argument("--timeout", metavar=STOP_TIMEOUT_OPTION.metavar, type=float,
                      help=STOP_TIMEOUT_OPTION.help)
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


def _processes(parser: argparse.ArgumentParser, what: str, default: str, same: str) -> None:
    """--processes N of a command whose per-worker work a pool of processes may do."""
    parser.add_argument("--processes", metavar="N", type=int,
                        help=f"processes that {what} (default: {default}, at most "
                        f"{MOST_PROCESSES}, none below {FEWEST_WORKERS} workers; 0: none; "
                        f"never more than the CPUs); the same {same} either way")
