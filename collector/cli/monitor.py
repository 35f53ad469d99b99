"""``collector monitor`` and ``collector watch``: the commands that talk to the Dask
scheduler, through Monitor."""

from __future__ import annotations

import argparse
import json
import logging
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dask_metrics.collector.cli.options import (
    Terminal,
    cannot_write,
    duration,
    replica_labels,
    words,
)
from dask_metrics.collector.errors import (
    CollectorError,
    UsageError,
)
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.timespec import (
    format_rfc3339,
    to_ms,
)
from dask_metrics.collector.monitor.monitor import Monitor
from dask_metrics.collector.monitor.options import STOP_TIMEOUT_OPTION, read
from dask_metrics.collector.monitor.watch import (
    MAX_POLL,
    MIN_POLL,
    WatchOptions,
    watch,
)
from dask_metrics.collector.store.connection import OPTIONS as CONNECTION_OPTIONS
from dask_metrics.collector.store.settings import MAX_TIMEOUT, valid_timeout


def scheduler_client(args: argparse.Namespace) -> Any:
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


def run_monitor(args: argparse.Namespace) -> int:
    with _warnings_as_lines(Terminal(quiet=False)):
        return _monitor_action(args)


def _monitor_action(args: argparse.Namespace) -> int:
    metrics = words(getattr(args, "metrics", None))
    try:
        select(metrics)
    except ValueError as exc:
        raise UsageError(f"--metrics: {exc}") from None
    if getattr(args, "timeout", None) is not None:  # checked before any wait on the scheduler
        read(STOP_TIMEOUT_OPTION, args.timeout, "timeout")
    with scheduler_client(args) as client:
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


def run_watch(args: argparse.Namespace, settings_cli: dict[str, Any]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s collector watch: %(message)s")
    options = WatchOptions(out=Path(args.out), layout=args.layout,
                           step=duration(args.step, "--step"), workers=words(args.workers),
                           poll=duration(args.poll, "--poll", MAX_POLL, MIN_POLL))
    stop = threading.Event()  # SIGINT, SIGTERM and SIGHUP stop it by raising (see watch)
    connection = {k: v for k, v in settings_cli.items() if k in CONNECTION_KEYS}
    labels = replica_labels(args)
    try:
        return watch(lambda: scheduler_client(args),
                     lambda client: Monitor(client, config=args.config, cluster=args.cluster,
                                            replica_labels=labels, **connection),
                     options, stop, once=args.once)
    except OSError as exc:  # --out, checked up front: later failures are retried
        raise CollectorError(cannot_write(exc)) from None


CONNECTION_KEYS = ("prometheus", *CONNECTION_OPTIONS)
