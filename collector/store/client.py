"""A small client of the Prometheus HTTP API (``/api/v1/query``, ``/query_range``), for
Prometheus and the systems that speak its API: Thanos, Mimir, VictoriaMetrics.

The request itself (retries, deadlines, caps, TLS) is the transport's (``transport``), what
an answer means is ``answer``'s (pure); here: the queries and the series they hold. Every
failure is one PrometheusError whose message is one line: what failed and what to do.
Credentials never reach a message: the URL we keep has none (user:password is moved to
basic auth), headers are never logged, and any secret a server echoes back is masked
(``redaction``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import yaml

from dask_metrics.collector.errors import PrometheusError
from dask_metrics.collector.model.series import Series
from dask_metrics.collector.store.answer import ERROR_SNIPPET, decode, series_limit, too_big
from dask_metrics.collector.store.redaction import Scrubber, one_line, split_credentials
from dask_metrics.collector.store.remote_read import CONTENT_TYPE as REMOTE_READ_TYPE
from dask_metrics.collector.store.remote_read import (
    REQUEST_HEADERS,
    Matcher,
    parse_selector,
    read_request,
    read_series,
)
from dask_metrics.collector.store.series_limits import SeriesLimits
from dask_metrics.collector.store.settings import ConnectionSettings
from dask_metrics.collector.store.transport import (
    Answer,
    Transport,
)
from dask_metrics.collector.store.vm_export import CONTENT_TYPE as EXPORT_TYPE
from dask_metrics.collector.store.vm_export import export_series

__all__ = ["ConnectionSettings", "PrometheusClient", "PrometheusError", "Store"]

STORE_PARAMS = {"nocache": "1", "latency_offset": "0"}
"""Sent with every query so that VictoriaMetrics answers as Prometheus does (Prometheus,
Thanos and Mimir ignore them): ``nocache=1``, else its response cache rounds a query_range's
start down to a multiple of the step (grid points before --since, off since + k*step);
``latency_offset=0``, else instant queries do not see the last 30 s (-search.latencyOffset),
and a worker or a monitor session that started seconds ago is not found."""
REMOTE_READ, EXPORT, QUERY = "remote read", "export", "query"  # how raw samples are read
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
        self._raw_api = {"remote-read": REMOTE_READ, "export": EXPORT}.get(settings.read_api)
        self._raw_used = QUERY
        self._external: dict[str, str] | None = None
        self.series_limits = SeriesLimits()  # what this store's limit on series refused
        self._lists_labels = True  # until the labels API refuses: the series API then

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

    def label_values(self, name: str, sel: str, start: float, end: float) -> list[str]:
        """The values of the label ``name`` among the series of ``sel`` in [start, end]
        (unix seconds), or more: from the labels API, else the series API ("" for a series
        without the label), else the labels API for every series of the store, whichever
        it answers. VictoriaMetrics counts the series a match[] selects against its limit
        on series in the first, and against -search.maxSeries (30,000) in the second."""
        form = {"match[]": sel, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        what = f"the values of {name} in {sel}"
        if self._lists_labels:
            try:
                return self._values(name, form, what)
            except PrometheusError as exc:
                if exc.status is None or exc.status in (401, 403):
                    raise  # unreachable, or the credentials: the others would fail too
                self._lists_labels = False
        try:
            found = self._decode(self._transport.request("POST", "series", form), what)
        except PrometheusError as exc:
            if not exc.splittable:
                raise
            del form["match[]"]  # every value the store holds: more, never fewer
            return self._values(name, form, what)
        return [str(labels.get(name, "")) for labels in found or () if isinstance(labels, dict)]

    def _values(self, name: str, form: dict[str, str], what: str) -> list[str]:
        path = f"label/{quote(name, safe='')}/values?{urlencode(form)}"
        return [str(v) for v in self._decode(self._transport.request("GET", path), what) or ()]

    def read_raw(self, selector: str, lo: int, hi: int) -> list[Series] | None:
        """The raw samples of ``selector`` in [lo, hi] (ms) by the API the settings ask for
        (``read_api``): Prometheus' remote-read API, or VictoriaMetrics' export API. What a
        query of ``selector[...]`` gives, staleness markers left out, for a fraction of the
        server's CPU. None where it does not give exactly that (a store without it, an
        answer of another kind, a matcher on one of the server's external labels): the
        caller then queries, and once the API has failed this client asks it no more. A
        server that cannot be reached is an error, as for a query."""
        api = self._raw_api
        matchers = None if api is None else parse_selector(selector)
        if matchers is None or (api == REMOTE_READ and any(
                m.name in self._external_labels() for m in matchers)):
            return None
        try:
            found = (self._remote_read(matchers, lo, hi) if api == REMOTE_READ
                     else self._export(selector, lo, hi))
        except ValueError:  # not what it claims to be: the query API says it plainly
            found = None
        if found is None:
            self._raw_api = None
            if self._raw_used != QUERY:
                self._raw_used = f"{self._raw_used}, then {QUERY}"
        elif self._raw_used == QUERY:
            self._raw_used = api
        return found

    @property
    def raw_reads(self) -> str:
        """Which API has read the raw samples so far: "query", "remote read" or "export",
        or "remote read, then query" where that API failed after it had read some."""
        return self._raw_used

    def _answer(self, path: str, body: Mapping[str, str] | bytes,
                headers: Mapping[str, str] | None, kind: str) -> Answer | None:
        """A successful answer of ``kind`` to a raw read, or None; an unreachable or too
        slow server raises, as it would for a query, and so does a refusal that names a
        limit (VictoriaMetrics' -search.maxExportSeries): splittable, as a query's."""
        try:
            answer = self._transport.request("POST", path, body, headers)
        except PrometheusError as exc:
            if exc.status is None:
                raise
            return None
        if answer.status in (400, 422):
            text = answer.content.decode("utf-8", "replace")
            if too_big(text):
                raise self._error(f"Prometheus rejected the raw read of {path} "
                                  f"({self._scrub.snippet(text, ERROR_SNIPPET, ends=True)})",
                                  answer.status, None, True, series_limit(text))
        given = answer.headers.get("Content-Type", "").split(";")[0].strip()
        return answer if answer.status == 200 and given == kind else None

    def _remote_read(self, matchers: list[Matcher], lo: int, hi: int) -> list[Series] | None:
        answer = self._answer("read", read_request(matchers, lo, hi), REQUEST_HEADERS,
                              REMOTE_READ_TYPE)
        if answer is None:
            return None
        external = self._external_labels()
        return [Series({k: v for k, v in labels.items() if external.get(k) != v}, times,
                       values)
                for labels, times, values in read_series(answer.content, lo, hi)]

    def _export(self, selector: str, lo: int, hi: int) -> list[Series] | None:
        # a millisecond wider each side: the collector clips, whatever the store rounds
        answer = self._answer("export", {"match[]": selector, "start": f"{(lo - 1) / 1000:.3f}",
                                         "end": f"{(hi + 1) / 1000:.3f}"}, None,
                              EXPORT_TYPE)
        if answer is None:
            return None
        return [Series(labels, times, values)
                for labels, times, values in export_series(answer.content)]

    def _external_labels(self) -> dict[str, str]:
        """The server's external labels, which remote read adds to every series (a query
        does not): from its configuration, once; none where it does not show it (Mimir)."""
        if self._external is None:
            self._external = {}
            try:
                answer = self._transport.request("GET", "status/config")
                config = yaml.safe_load(orjson.loads(answer.content)["data"]["yaml"])
                labels = (config.get("global") or {}).get("external_labels") or {}
                self._external = {str(k): str(v) for k, v in labels.items()}
            except (PrometheusError, ValueError, KeyError, TypeError, AttributeError,
                    yaml.YAMLError):
                pass
        return self._external

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
            raise self._error(exc.args[0], exc.status, exc.error_type, exc.splittable,
                              exc.series_bound) from None
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
               splittable: bool = False, series_bound: bool = False) -> PrometheusError:
        return self._transport.error(message, status, error_type, splittable, series_bound)


