"""``collector watch``: export every monitor session once, as it stops, into its own folder.

A long-running service: the scheduler and Prometheus may go away and come back; a session
whose export failed is tried again at the next polls, and one that cannot be exported does
not hold back the sessions after it. The folder of a session is its record:
``export`` moves it into place only once complete, so a session is exported exactly once,
across restarts of the watcher too.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dask_metrics.atomicfile import atomic_write_text
from dask_metrics.collector.errors import CollectorError, Terminated, UsageError
from dask_metrics.collector.model.timespec import format_rfc3339, to_ms
from dask_metrics.collector.monitor.identity import same_session
from dask_metrics.collector.monitor.monitor import Monitor
from dask_metrics.collector.store.client import PrometheusError

logger = logging.getLogger(__name__)

DEFAULT_POLL = 5.0
MIN_POLL, MAX_POLL = 0.1, 3600.0
"""Poll bounds, in seconds: shorter polls keep a core and the scheduler busy for nothing; a
session stopped is exported within the hour, anything longer is a typing error."""


def check_poll(seconds: float) -> float:
    """A poll of 0, below 0 or NaN would busy-loop the watcher; an infinite one overflows the
    wait: refused, with the accepted range."""
    if not MIN_POLL <= seconds <= MAX_POLL:  # NaN fails every comparison
        raise ValueError(f"must be from {MIN_POLL:g} to {MAX_POLL:g} s")
    return seconds


@dataclass(frozen=True)
class WatchOptions:
    out: Path
    layout: str = "tidy"
    step: float | None = None
    workers: Sequence[str] | None = None
    poll: float = DEFAULT_POLL

    def __post_init__(self) -> None:
        check_poll(self.poll)


def prepare_out(out: Path) -> None:
    """Create ``out`` and check, before the first poll, that it takes files: a path that is
    a file, or a read-only folder, would otherwise fail every export, poll after poll.
    Raises OSError naming ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryFile(dir=out):  # O_TMPFILE on Linux: never seen by anyone
            pass
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(out)) from None


def session_folder(session: dict[str, Any]) -> str:
    """``session-0003-20240501T120000Z``: the id orders them, the start time tells a
    restarted scheduler's sessions (ids counting from 0 again) from the old ones."""
    stamp = format_rfc3339(to_ms(float(session["start"])))[:19]
    return f"session-{int(session['id']):04d}-{stamp.replace('-', '').replace(':', '')}Z"


MAX_TRIES = 3
"""Polls at which a session's export may fail (with Prometheus answering) before the watcher
gives up on it and records why in ``<folder>.failed.json``; delete that file to try again."""


def failure_record(out: Path, session: dict[str, Any]) -> Path:
    return out / f"{session_folder(session)}.failed.json"


def tries_so_far(out: Path, session: dict[str, Any]) -> int:
    try:
        return int(json.loads(failure_record(out, session).read_text())["tries"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def pending(sessions: Sequence[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Stopped sessions that have no folder yet and have not failed MAX_TRIES times."""
    return [s for s in sessions if s.get("stop") and not (out / session_folder(s)).exists()
            and tries_so_far(out, s) < MAX_TRIES]


def _server_trouble(exc: CollectorError) -> bool:
    """Prometheus unreachable, timing out or failing (5xx): nothing to hold against one
    session; the whole round is tried again later."""
    return isinstance(exc, PrometheusError) and (exc.status is None or exc.status >= 500)


def stopped_sessions(monitor: Monitor, seen: dict[str, Any]) -> list[dict[str, Any]]:
    """The stopped sessions the scheduler remembers, and those an earlier poll saw running
    that the scheduler has lost since (it restarted): from Prometheus, ended with their
    scheduler. ``seen["watching"]`` carries the sessions to look after from poll to poll:
    the running one, and lost ones Prometheus has not seen end yet (its first scrape of the
    restarted scheduler is still to come)."""
    sessions = list(monitor.sessions())
    status = monitor.status()
    current = status.get("session") if status.get("running") else None
    watching = [current] if current else []
    for lost in seen.get("watching", []):
        if (current and same_session(current, lost)) or any(same_session(s, lost)
                                                             for s in sessions):
            continue
        try:
            found = monitor.recorded(lost, patience=0.0)
        except CollectorError as exc:
            if isinstance(exc, PrometheusError):
                raise  # ``seen`` unchanged: asked again at the next poll
            logger.warning("%s", exc)  # nothing recorded: nothing to export
            continue
        if found["stop"] is None:
            watching.append(lost)
        else:
            sessions.append(found)
    seen["watching"] = watching
    return sessions


def export_pending(monitor: Monitor, options: WatchOptions,
                   seen: dict[str, Any] | None = None) -> list[str]:
    """Export every stopped session not exported yet, each on its own: one that fails does
    not hold back the others. Returns the problems (one line each); raises when the
    scheduler or Prometheus is in trouble, so that the caller retries the whole round.
    ``seen``: what the previous poll saw running (see stopped_sessions)."""
    problems = []
    for session in pending(stopped_sessions(monitor, {} if seen is None else seen),
                           options.out):
        folder = options.out / session_folder(session)
        try:
            monitor.export_session(session, folder, layout=options.layout,
                                   step=options.step, workers=options.workers)
        except CollectorError as exc:
            if _server_trouble(exc):
                raise
            tries = tries_so_far(options.out, session) + 1
            atomic_write_text(failure_record(options.out, session), json.dumps(
                {"session": session, "tries": tries, "error": str(exc)}, indent=2) + "\n")
            left = MAX_TRIES - tries
            problems.append(f"monitor session {session['id']} could not be exported ({exc}); "
                            + (f"{left} more tr{'y' if left == 1 else 'ies'}" if left else
                               f"giving up, see {failure_record(options.out, session)}"))
            continue
        logger.info("exported monitor session %s into %s", session["id"], folder)
    return problems


def watch(connect: Callable[[], Any], make_monitor: Callable[[Any], Monitor],
          options: WatchOptions, stop: threading.Event, once: bool = False) -> int:
    """Poll until ``stop`` is set, or SIGINT/SIGTERM/SIGHUP (raised as KeyboardInterrupt or
    Terminated: an export under way is abandoned, its staging folder removed, and the
    session is exported at the next start); ``once``: export what is pending and return,
    1 if a session failed.

    The scheduler or Prometheus being unreachable is logged once (not once per retry) and
    retried at the next poll, waiting longer each time (up to a minute); with ``once`` it
    raises CollectorError instead, as nothing is retried. A session whose export fails is
    logged and tried again at the next polls, MAX_TRIES in all. Raises OSError when
    ``options.out`` cannot be written, UsageError for bad options (no retry mends those).
    """
    prepare_out(options.out)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # our one line says it all
    client = None
    seen: dict[str, Any] = {}  # the sessions to look after (see stopped_sessions)
    delay, last_problem, failed = options.poll, "", False
    try:
        while not stop.is_set():
            try:
                if client is None:
                    client = connect()
                for line in export_pending(make_monitor(client), options, seen):
                    logger.warning("%s", line)
                    failed = True
                delay, problem = options.poll, ""
            except UsageError:
                raise
            except (CollectorError, OSError, TimeoutError) as exc:
                problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if once:
                    raise CollectorError(problem) from None
                if client is not None and not _connected(client):
                    client.close()
                    client = None
                delay = min(delay * 2, 60.0)
            if problem and problem != last_problem:
                logger.warning("%s; retrying", problem)
            elif last_problem and not problem:
                logger.warning("working again")
            last_problem = problem
            if once:
                break
            stop.wait(delay)
    except (KeyboardInterrupt, Terminated):
        logger.warning("stopping; a session being exported is exported at the next start")
    finally:
        if client is not None:
            client.close()
    return 1 if once and failed else 0


def _connected(client: Any) -> bool:
    return getattr(client, "status", "") == "running"
