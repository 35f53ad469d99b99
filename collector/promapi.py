"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/query_range``), for
Prometheus and the systems that speak its API: Thanos, Mimir, VictoriaMetrics.

The request itself (retries, deadlines, caps, TLS) is the transport's (``transport``);
here: the queries, what an answer means (``decode``, pure) and the series it holds. Every
failure is one PrometheusError whose message is one line: what failed and what to do.
Credentials never reach a message: the URL we keep has none (user:password is moved to
basic auth), headers are never logged, and any secret a server echoes back is masked
(``redaction``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from dask_metrics.collector.connection_settings import ConnectionSettings
from dask_metrics.collector.errors import PrometheusError, setting
from dask_metrics.collector.redaction import Scrubber, one_line, split_credentials
from dask_metrics.collector.series import Series
from dask_metrics.collector.transport import (
    MAX_RETRY_AFTER,
    RETRY_STATUSES,
    Answer,
    Transport,
    asked_wait,
)

__all__ = ["ConnectionSettings", "PrometheusClient", "PrometheusError", "Store", "decode"]

STORE_PARAMS = {"nocache": "1", "latency_offset": "0"}
"""Sent with every query so that VictoriaMetrics answers as Prometheus does (Prometheus,
Thanos and Mimir ignore them): ``nocache=1``, else its response cache rounds a query_range's
start down to a multiple of the step (grid points before --since, off since + k*step);
``latency_offset=0``, else instant queries do not see the last 30 s (-search.latencyOffset),
and a worker or a monitor session that started seconds ago is not found."""
PROMQL = "promql"  # Prometheus, Thanos, Mimir, Cortex: one query language, one behaviour
VICTORIA_METRICS = "victoriametrics"
VICTORIA_METRICS_NOTE = (
    "the store is VictoriaMetrics: samples that were NaN (a GPU reading that failed) were "
    "dropped when stored, so their cells are empty where Prometheus' would read NaN "
    "(docs/collector.md, Stores)")
@dataclass(frozen=True)
class Store:
    """What answers the queries: ``kind`` is PROMQL or VICTORIA_METRICS."""

    kind: str
    version: str | None

    @property
    def note(self) -> str | None:
        """What an export from this store holds differently from Prometheus', if anything."""
        return VICTORIA_METRICS_NOTE if self.kind == VICTORIA_METRICS else None

class _Milliseconds(dict[Any, int]):
    """Prometheus' timestamps (JSON numbers, seconds) as integer milliseconds, each converted
    once: the series of one answer share their scrape times."""

    def __missing__(self, seconds: Any) -> int:
        ms = self[seconds] = round(float(seconds) * 1000)
        return ms


class _Floats(dict[str, float]):
    """Prometheus' sample values (JSON strings) as floats, each distinct one parsed once:
    values repeat (totals, temperatures, percents), and a hit costs less than a parse. Equal
    strings parse alike, so the result is exactly float()'s."""

    def __missing__(self, text: str) -> float:
        value = self[text] = float(text)
        return value


class PrometheusClient:
    """Instant and range queries over POST (long PromQL fits, nothing lands in access logs).

    ``on_warning`` receives each distinct warning or info a response carries (Thanos partial
    responses, Prometheus annotations); they are also kept in ``warnings``.
    """

    def __init__(self, settings: ConnectionSettings,
                 on_warning: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.warnings: list[str] = []
        self._on_warning = on_warning
        _, url_user, url_password = split_credentials(settings.url)
        user = settings.user if settings.user is not None else url_user
        password = settings.password if settings.password is not None else url_password
        secrets = [s for s in (password, settings.bearer_token) if s]
        secrets += [v for _, v in settings.headers if v]
        if user is not None and password:
            secrets.append(f"{user}:{password}")  # what Basic auth encodes
        self._scrub = Scrubber(secrets)
        self._transport = Transport(settings, self._scrub)
        self.url = self._transport.url

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ---- queries ---------------------------------------------------------------------------

    def query(self, expr: str, at: float) -> list[Series]:
        """An instant query at unix time ``at``: a vector, or raw samples for ``metric[5m]``."""
        data = self._api("query", {"query": expr, "time": f"{at:.3f}", **STORE_PARAMS}, expr)
        return self._series(data, expr)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """A range query on the grid start + k*step (at most 11,000 points per series)."""
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}",
                **STORE_PARAMS}
        return self._series(self._api("query_range", form, expr), expr)

    def build_version(self) -> str | None:
        """The server's version, when it tells (Mimir and VictoriaMetrics may not)."""
        try:
            data = self._decode(self._transport.request("GET", "status/buildinfo"),
                                "status/buildinfo")
        except PrometheusError:
            return None
        return str(data.get("version")) if isinstance(data, dict) and data.get("version") else None

    def store(self) -> Store:
        """Which kind of store answers, and its version. PromQL servers (Prometheus, Thanos,
        Mimir) report a version; VictoriaMetrics does not, and is told apart by MetricsQL's
        ``now()``, which PromQL refuses: one small instant query, only when no version came
        back."""
        version = self.build_version()
        if version is None:
            try:
                self._api("query", {"query": "now()", **STORE_PARAMS}, "now()")
            except PrometheusError:
                pass
            else:
                return Store(VICTORIA_METRICS, None)
        return Store(PROMQL, version)

    # ---- plumbing --------------------------------------------------------------------------

    def _api(self, path: str, form: dict[str, str], expr: str) -> Any:
        # Ask the server to stop a little before we would, so a slow query ends in its clear
        # "timeout" answer (which the caller can split) rather than a dropped connection.
        form["timeout"] = f"{max(round(self.settings.read_timeout * 900), 100)}ms"
        return self._decode(self._transport.request("POST", path, form), f"the query {expr}")

    def _decode(self, answer: Answer, what: str) -> Any:
        try:
            data, notes = decode(answer, self.url, what, self.settings.retries,
                                 self._scrub.snippet)
        except PrometheusError as exc:
            raise self._error(exc.args[0], exc.status, exc.error_type, exc.splittable) from None
        for note in notes:
            self.warn(note)
        return data

    def _series(self, data: Any, expr: str) -> list[Series]:
        """Matrix, vector or scalar results as Series with millisecond timestamps."""
        try:
            kind, result = data["resultType"], data["result"]
            if kind == "scalar":
                result = [{"metric": {}, "value": result}]
            out = []
            ms, floats = _Milliseconds(), _Floats()
            last_stamps: tuple[Any, ...] | None = None
            times: list[int] = []
            for item in result:
                points = item["values"] if "values" in item else [item["value"]]
                stamps, values = zip(*points, strict=True) if points else ((), ())
                if stamps != last_stamps:  # usually the previous series' scrape times
                    last_stamps, times = stamps, list(map(ms.__getitem__, stamps))
                out.append(Series(dict(item.get("metric", {})), times.copy(),
                                  list(map(floats.__getitem__, values))))
            return out
        except (KeyError, TypeError, ValueError) as exc:
            raise self._error(f"Prometheus at {self.url} answered an unexpected result for "
                              f"{one_line(expr)} ({type(exc).__name__}: {exc})") from None

    def warn(self, message: str) -> None:
        """Keep ``message`` among the warnings (once) and hand it to ``on_warning``: a
        response's, or the caller's about the data."""
        message = self._scrub(message)
        if message in self.warnings:
            return
        self.warnings.append(message)
        if self._on_warning:
            self._on_warning(message)

    def _error(self, message: str, status: int | None = None, error_type: str | None = None,
               splittable: bool = False) -> PrometheusError:
        return self._transport.error(message, status, error_type, splittable)


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
        text = error.lower()
        splittable = status in (422, 503) and (
            error_type == "timeout" or any(w in text for w in (
                "too many", "timeout", "timed out", "exceed",
                "cannot select more than")))  # VictoriaMetrics' -search.maxSamplesPerQuery
        raise PrometheusError(f"Prometheus rejected {one_line(what)} ({error_type}: "
                              f"{snippet(error)})", status, error_type, splittable)
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
