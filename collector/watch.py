"""``collector watch``: export every monitor session once, as it stops, into its own folder.

A long-running service: the scheduler and Prometheus may go away and come back; a session
whose export failed is tried again at the next poll. The folder of a session is its record:
``export`` moves it into place only once complete, so a session is exported exactly once,
across restarts of the watcher too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.monitor import Monitor
from dask_metrics.collector.timespec import format_rfc3339, to_ms

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchOptions:
    out: Path
    layout: str = "tidy"
    step: float | None = None
    workers: Sequence[str] | None = None
    poll: float = 5.0


def session_folder(session: dict[str, Any]) -> str:
    """``session-0003-20240501T120000Z``: the id orders them, the start time tells a
    restarted scheduler's sessions (ids counting from 0 again) from the old ones."""
    stamp = format_rfc3339(to_ms(float(session["start"])))[:19]
    return f"session-{int(session['id']):04d}-{stamp.replace('-', '').replace(':', '')}Z"


def pending(sessions: Sequence[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Stopped sessions that have no folder yet."""
    return [s for s in sessions if s.get("stop") and not (out / session_folder(s)).exists()]


def export_pending(monitor: Monitor, options: WatchOptions) -> list[Path]:
    """Export every stopped session not exported yet; returns the folders written."""
    written = []
    for session in pending(monitor.sessions(), options.out):
        folder = options.out / session_folder(session)
        monitor.export_session(session, folder, layout=options.layout, step=options.step,
                               workers=options.workers)
        logger.info("exported monitor session %s into %s", session["id"], folder)
        written.append(folder)
    return written


def watch(connect: Callable[[], Any], make_monitor: Callable[[Any], Monitor],
          options: WatchOptions, stop: threading.Event, once: bool = False) -> int:
    """Poll until ``stop`` is set; ``once``: export what is pending and return.

    Failures (scheduler unreachable, Prometheus down) are logged once per kind of failure
    and retried at the next poll, waiting longer each time (up to a minute).
    """
    options.out.mkdir(parents=True, exist_ok=True)
    client = None
    delay, last_problem = options.poll, ""
    while not stop.is_set():
        try:
            if client is None:
                client = connect()
            export_pending(make_monitor(client), options)
            delay, problem = options.poll, ""
        except (CollectorError, OSError, TimeoutError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
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
    if client is not None:
        client.close()
    return 1 if once and last_problem else 0


def _connected(client: Any) -> bool:
    return getattr(client, "status", "") == "running"
