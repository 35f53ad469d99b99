"""The main job end to end on this machine: a local Dask cluster with GPU metrics, a
workload, then per-worker CSV files, the peak-memory table and plots.

Real GPUs through NVML when this machine has them, otherwise simulated GPUs (said loudly).
Everything it starts is stopped at the end, also on Ctrl-C, SIGTERM, SIGHUP or a failure; a
second run reuses the same folders (Prometheus keeps the earlier runs' data).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from distributed import Client

from dask_metrics.collector.cli.main import main as collector_main
from dask_metrics.collector.cli.parser import OneLineParser
from dask_metrics.collector.errors import (
    CollectorError,
    Terminated,
    UsageError,
    raise_on_termination,
)
from dask_metrics.collector.monitor.monitor import Monitor
from dask_metrics.collector.monitor.results import SESSION_TABLES
from dask_metrics.configfile import parse_bytes
from dask_metrics.contract import (
    ACTIVITIES_CSV,
    CURRENT_JOB,
    GPU_BY_PREFIX_CSV,
    IDLE,
    JOBS_CSV,
    UP,
)
from dask_metrics.demo.localstack import LocalStack, StackOptions
from dask_metrics.demo.workload import Plan, run
from dask_metrics.exporter.gpu_source import SourceUnavailable
from dask_metrics.exporter.nvml_source import NvmlSource

EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
DEMO_CLUSTER = "dask-metrics-demo"  # the dask_cluster label of the demo's series


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


def real_gpus() -> list[str]:
    """UUIDs of this machine's GPUs (what CUDA_VISIBLE_DEVICES accepts, MIG devices
    included); [] (and why, loudly) when there are none."""
    source = NvmlSource()
    try:
        source.start()
        found = [c.uuid for c in source.candidates()]
    except SourceUnavailable as exc:
        found, why = [], str(exc)
    else:
        why = "NVML sees no GPU"
    finally:
        source.close()
    if not found:
        bar = "=" * 78
        print(f"{bar}\nNO NVIDIA GPU HERE ({why}).\nThe demo runs on SIMULATED GPUs: every "
              f"series is labelled simulated=\"true\"; each\nsimulated GPU mirrors its worker "
              f"process (utilisation = its CPU use, memory used =\nits resident memory), so "
              f"the workload's phases and its spike show up.\n{bar}", flush=True)
    return found


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="bash scripts/demo.sh", description=__doc__)
    parser.add_argument("--workers", type=int, metavar="N",
                        help="Dask workers, each with a sidecar exporter (default: one per "
                        "GPU, or 3 with simulated GPUs)")
    parser.add_argument("--out", type=Path, default=Path("dask-metrics-demo"), metavar="DIR",
                        help="folder for results, plots, Prometheus' data and the logs "
                        "(default %(default)s)")
    parser.add_argument("--keep-running", action="store_true",
                        help="after the results, keep everything running until Ctrl-C")
    parser.add_argument("--simulate", action="store_true",
                        help="simulated GPUs even where real ones are present")
    parser.add_argument("--simulate-memory", default="4GiB", metavar="BYTES",
                        help="memory of each simulated GPU (default %(default)s)")
    parser.add_argument("--spike", default="1GiB", metavar="BYTES",
                        help="memory the spike task holds (default %(default)s)")
    parser.add_argument("--prometheus-port", type=int, default=0, metavar="PORT",
                        help="Prometheus' port (default: a free one)")
    args = parser.parse_args(argv)
    for option in ("simulate_memory", "spike"):  # the exporter's rule for sizes
        try:
            setattr(args, option, int(parse_bytes(getattr(args, option))))
        except ValueError as exc:
            parser.error(f"--{option.replace('_', '-')}: {exc}")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be 1 or more")
    return args


def _wait_for_idle_scrape(stack: LocalStack, after: float) -> None:
    """Until Prometheus holds a scheduler scrape showing the cluster idle and GPU samples of
    every worker taken after ``after``: the CSV files then end with the idle phase."""
    job = CURRENT_JOB.name
    idle = f"{job} == {IDLE} and timestamp({job}) > {after}"
    stack.wait("a scrape of the idle cluster after the workload",
               lambda: bool(stack.query(idle)) and stack.scraped_since(UP.name, after))


def _results(stack: LocalStack, monitor: Monitor, out: Path) -> None:
    results, plots = out / "results", out / "plots"
    exported = monitor.to_csv(results)
    say(f"monitor.to_csv({str(results)!r}): {len(exported.files)} CSV file(s), "
        f"{exported.rows} rows:")
    for name in sorted(exported.files):
        print(f"  {results / name}")
    tables = results / SESSION_TABLES  # the folder's own CSV files are the workers'
    for path, what in ((tables / "workers.csv", "the workers and their GPUs"),
                       (tables / JOBS_CSV, "each job and DAG: name, client, outcome, "
                        "first/last seen"),
                       (tables / ACTIVITIES_CSV, "where each job's time went, per task prefix"),
                       (tables / GPU_BY_PREFIX_CSV, "GPU seconds, peak memory, energy per task "
                        "prefix"),
                       (results / "export.json", "what was exported, from where")):
        print(f"  {path}  ({what})")
    say(f"monitor.peak_memory() -> {monitor.peak_memory()} (% of each GPU's memory, per "
        "worker, per GPU)")
    say(f"monitor.successful_jobs() -> {monitor.successful_jobs()} (per job, per DAG)")
    _command(["peaks", "--since", "monitor", "--prometheus", stack.prometheus_url])
    _command(["plot", "--csv", str(results), "--out", str(plots), "--format", "png", "svg"])
    for path in sorted(plots.glob("*.png")):
        print(f"  {path}  (+ .svg)")
    report = monitor.report(out / "report")
    say(f"monitor.report({str(out / 'report')!r}): the session report, one page to open in "
        "a browser:")
    for path in report.files:
        print(f"  {path}")


def _command(args: list[str]) -> None:
    """Run a ``collector`` command in this process, shown as the user would type it; a
    signal it caught (exit 128 + the signal) stops the demo as that signal would have."""
    say("$ collector " + " ".join(args))
    code = collector_main(args)
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if code > 128:
        raise Terminated(code - 128)
    if code != 0:
        raise CollectorError(f"'collector {args[0]}' failed (see above)")


def _signal_name(exc: Terminated) -> str:
    return signal.Signals(exc.signum).name


def _keep_running(stack: LocalStack) -> None:
    """Until Ctrl-C, SIGTERM or SIGHUP: each is the expected end of this wait, not a failure,
    also the moment after the line that asks for it."""
    try:
        say(f"everything keeps running: Prometheus {stack.prometheus_url}, Dask "
            f"dashboard {stack.dashboard_url}. Press Ctrl-C to stop.")
        threading.Event().wait()
    except KeyboardInterrupt:
        say("stopping")
    except Terminated as exc:
        say(f"stopping ({_signal_name(exc)})")


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except UsageError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    raise_on_termination()  # as the collector commands it runs do: one handler throughout
    try:
        _demo(args)
    except KeyboardInterrupt:
        say("interrupted: everything started was stopped")
        return EXIT_INTERRUPTED
    except Terminated as exc:  # the collector's convention: 128 + the signal
        say(f"stopped by {_signal_name(exc)}: everything started was stopped")
        return 128 + exc.signum
    except (CollectorError, OSError) as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    say(f"done; everything started was stopped. Results in {args.out.absolute()}")
    return 0


def _demo(args: argparse.Namespace) -> None:
    """Start the stack, run the workload, write the results; every step may be cut short by
    KeyboardInterrupt or Terminated, and the stack is stopped on the way out."""
    gpus = [] if args.simulate else real_gpus()
    if args.simulate:
        say("SIMULATED GPUs, as asked (--simulate): every series is labelled simulated=\"true\"")
    workers = args.workers or (len(gpus) if gpus else 3)
    out = args.out.absolute()
    # One name for every run into this folder: its Prometheus keeps the earlier runs' series,
    # and a name derived from the scheduler's port would make each run another cluster.
    options = StackOptions(out, workers, gpus, str(args.simulate_memory), args.prometheus_port,
                           cluster=DEMO_CLUSTER)
    say(f"starting Prometheus, a Dask scheduler and {workers} worker(s) with "
        f"{'sidecar exporters on ' + str(len(gpus)) + ' GPU(s)' if gpus else 'simulated GPUs'}"
        f"; logs in {out / 'logs'}")
    with LocalStack(options) as stack:
        say(f"Prometheus: {stack.prometheus_url} (data in {stack.prometheus_data}); "
            f"Dask dashboard: {stack.dashboard_url}; scheduler: {stack.scheduler_address}")
        with Client(stack.scheduler_address, name="demo-monitor",
                    set_as_default=False) as client:
            monitor = Monitor(client)  # Prometheus' URL comes from the scheduler preload
            session = monitor.start()["session"]
            say(f"monitor.start(): session {session['id']}")
            where = run(stack.scheduler_address, Plan(spike_bytes=args.spike), say)
            say(f"the spike held {where}")
            _wait_for_idle_scrape(stack, time.time())
            monitor.stop()
            say("monitor.stop()")
            _results(stack, monitor, out)
        if args.keep_running:
            _keep_running(stack)


if __name__ == "__main__":
    sys.exit(main())
