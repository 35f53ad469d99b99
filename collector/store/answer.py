"""What an answer of the Prometheus HTTP API means (pure): its data and notes, or the one
PrometheusError it amounts to, and whether a refusal is for a limit that a smaller
question may pass."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from dask_metrics.collector.errors import PrometheusError, setting
from dask_metrics.collector.store.redaction import one_line
from dask_metrics.collector.store.transport import (
    MAX_RETRY_AFTER,
    RETRY_STATUSES,
    Answer,
    asked_wait,
)

ERROR_SNIPPET = 300
"""Characters of a query engine's error kept in a message: VictoriaMetrics echoes the
query (twice) before the limit it met."""
_SERIES_LIMIT = re.compile(
    r"timeseries exceed"  # VictoriaMetrics: "the number of matching timeseries exceeds N"
    r"|(max|maximum) number of series"  # Mimir's and Cortex's max_fetched_series_per_query
    r"|series limit")  # Thanos' store limits: "exceeded series limit"

def too_big(error: str) -> bool:
    """Whether a store's refusal says the request was too big for one of its limits (a
    shorter range or fewer series may pass), not that it is wrong."""
    text = error.lower()
    return any(w in text for w in ("too many", "timeout", "timed out", "exceed",
                                   "hit the max",  # Cortex's limits
                                   "cannot select more than"))  # VictoriaMetrics' samples


def series_limit(error: str) -> bool:
    """Whether the limit a refusal names counts series (``too_big`` ones only)."""
    return _SERIES_LIMIT.search(error.lower()) is not None


def decode(resp: Answer, url: str, what: str, retries: int,
           snippet: Callable[..., str]) -> tuple[Any, list[str]]:
    """What an API answer means (pure): its data and the warnings and infos it carries, or
    the PrometheusError it amounts to, from its status, headers and body. ``snippet`` quotes
    the server's text (masked, cut short); ``retries``: how many were made."""
    status = resp.status
    try:
        body = orjson.loads(resp.content)  # about 2.5x json's speed on a matrix
    except ValueError:
        body = None
    reason = f"HTTP {status} {resp.reason or ''}".rstrip()
    if status in (401, 403):
        raise PrometheusError(
            f"Prometheus at {url} refused the credentials ({reason}: "
            f"{snippet(resp.text, 80)}): check {setting('user')}/{setting('password')}, "
            f"{setting('bearer_token')}, or a tenant header such as X-Scope-OrgID", status)
    if isinstance(body, dict) and body.get("status") == "error":
        error_type, error = str(body.get("errorType", "")), str(body.get("error", ""))
        splittable = status in (422, 503) and (error_type == "timeout" or too_big(error))
        raise PrometheusError(f"Prometheus rejected {one_line(what)} ({error_type}: "
                              f"{snippet(error, ERROR_SNIPPET, ends=True)})", status, error_type,
                              splittable, splittable and series_limit(error))
    if status == 404 or (status == 400 and ("unsupported path" in resp.text
                                            or "pathPrefix" in resp.text)):
        # VictoriaMetrics answers 400 outside its prefix: "unsupported path requested",
        # or "missing -http.pathPrefix=... in the requested path" when it has one
        raise PrometheusError(f"{url}/api/v1/... not found ({reason}): give {setting('url')} "
                              "the API's base URL, with its path prefix if it has one "
                              "(e.g. http://host/prometheus)", status)
    if status in RETRY_STATUSES:
        wait = asked_wait(resp.headers)
        if wait is not None and wait > MAX_RETRY_AFTER:  # the retries stopped at once
            raise PrometheusError(f"Prometheus at {url} answered {reason} and asked to be "
                                  f"retried after {wait:g} s (Retry-After), longer than the "
                                  f"{MAX_RETRY_AFTER:g} s the collector waits: try again "
                                  "later", status)
        raise PrometheusError(f"Prometheus at {url} failed with {reason} after "
                              f"{retries} retries ({snippet(resp.text, 120)}): "
                              f"try again later, or lower {setting('chunk')}", status)
    if not isinstance(body, dict) or status != 200:
        kind = resp.headers.get("Content-Type", "no content type")
        raise PrometheusError(f"Prometheus at {url} answered {reason} with {kind}, not the "
                              f"API's JSON ({snippet(resp.text, 80)!r}): is "
                              f"{setting('url')} the API's base URL, not a UI or a login page?",
                              status)
    notes = [f"Prometheus: {snippet(str(note))} (in {one_line(what, 120)})"
             for note in list(body.get("warnings") or []) + list(body.get("infos") or [])]
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {url} answered status "
                              f"{body.get('status')!r} for {one_line(what)}", status)
    return body.get("data"), notes
