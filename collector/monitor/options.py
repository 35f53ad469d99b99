"""Monitor's own keywords, declared once: ``Monitor(...)`` and ``Monitor.stop`` read them with
these readers, and ``collector monitor stop --timeout`` takes the stop timeout's reader and
help. (The connection keywords are the collector's connection options, declared in
connection.)"""

from __future__ import annotations

import math
from typing import Any

from dask_metrics.collector.errors import MonitorUsageError, setting
from dask_metrics.options import Option
from dask_metrics.values import finite_number

SCRAPE_WAIT = 30.0
"""Seconds a Monitor waits for Prometheus to scrape past a session's end before reading it."""
STOP_TIMEOUT = 60.0
"""Seconds ``Monitor.stop()`` waits for running DAGs unless told otherwise."""
MAX_SCRAPE_WAIT = 3600.0  # every wait on a peer is bounded


def scrape_wait(value: Any) -> float:
    seconds = finite_number(value)
    if seconds is None or not 0 <= seconds <= MAX_SCRAPE_WAIT:
        raise ValueError(f"must be 0 to {MAX_SCRAPE_WAIT:g} seconds")
    return seconds


def stop_timeout(value: Any) -> float:
    """0 or more seconds; ``math.inf`` (no limit) too: the user chose to wait for the DAGs."""
    seconds = math.inf if value == math.inf else finite_number(value)
    if seconds is None or not seconds >= 0:
        raise ValueError("must be 0 or more seconds")
    return seconds


SCRAPE_WAIT_OPTION = Option(
    "scrape_wait", scrape_wait, "seconds to wait for Prometheus to scrape past a session's end "
    f"before reading it (default {SCRAPE_WAIT:g})", "SECONDS")
STOP_TIMEOUT_OPTION = Option(
    "stop_timeout", stop_timeout, "wait at most this long for running DAGs (default "
    f"{STOP_TIMEOUT:g}; inf: no limit)", "SECONDS")
MONITOR = (SCRAPE_WAIT_OPTION, STOP_TIMEOUT_OPTION)


def read(option: Option, value: Any, name: str | None = None) -> Any:
    """``value`` read by ``option``'s reader; a MonitorUsageError (a ValueError) naming the
    keyword (``name``: another keyword taking the same value, e.g. ``stop(timeout=...)``)."""
    assert option.parse is not None
    try:
        return option.parse(value)
    except (TypeError, ValueError) as exc:
        raise MonitorUsageError(f"{setting(name or option.name)} {exc} (got {value!r})"
                                ) from None
